// Element-wise reductions of several equal-length buffers, the arithmetic at the heart of the
// shared-memory collectives. Every rank that reduces the same inputs in the same order gets the
// same bits, which is what keeps replicas identical after an all-reduce.
#pragma once

#include <c10/core/ScalarType.h>

#include <cstddef>

namespace loom::comm {

// True for the element types reduce_sum accepts: float, double, bfloat16, int32, int64.
bool reducible(c10::ScalarType dtype);

// out[i] = scale * (inputs[0][i] + inputs[1][i] + ... + inputs[count-1][i]), summed in input
// order. bfloat16 is accumulated in float and rounded once (to nearest even), so a sum of many
// ranks loses no more than one rounding. Integers ignore `scale` unless it is 1 (no averaging of
// integers). `out` may alias one of the inputs. Vectorised for AVX-512 and AVX2 where the CPU has
// them.
void reduce_sum(c10::ScalarType dtype, void* out, const void* const* inputs, int count,
                std::size_t elements, double scale);

}  // namespace loom::comm
