// Conversions between float and the 16-bit float types, on the calling thread. The tcp backend
// sums bfloat16 and float16 in float (partial sums travel as float, a sum is rounded once); it
// converts with these rather than with ATen, whose conversions run on LibTorch's intra-op thread
// pool: started from a communication thread beside the ranks' computation, those threads compete
// for the cores the peers need (a 256 KB bfloat16 all-reduce of 2 ranks on 2 busy cores took
// 31.8 ms that way, 0.5 ms this way).
#pragma once

#include <c10/core/ScalarType.h>

#include <cstddef>

namespace loom::comm {

// True for the types these convert: bfloat16 and float16.
bool widens_to_float(c10::ScalarType dtype);

// out[i] = float(in[i]) for `n` elements of `dtype`.
void widen_to_float(c10::ScalarType dtype, const void* in, float* out, std::size_t n);
// out[i] = in[i] rounded to `dtype` (to nearest even; NaN stays NaN), as c10's conversions and
// the shm backend's bfloat16 sums round.
void narrow_from_float(c10::ScalarType dtype, const float* in, void* out, std::size_t n);

}  // namespace loom::comm
