// torch's CUDA synchronisation warnings (what torch.cuda.set_sync_debug_mode("warn") turns on):
// with them on, each operation that makes the host wait for a GPU (a copy to host memory, .item(),
// nonzero, a stream or device synchronisation) raises a c10 warning, "called a synchronizing CUDA
// operation", through the calling thread's warning handler. The profiler counts them in a GPU
// step (profile/host_sync_counter.h).
//
// Loom links none of CUDA (core/device.h): the switch is reached in torch's CUDA library once it
// is loaded. torch keeps the mode in c10::cuda::warning_state(), an inline function's static
// object, one in the process (libc10_cuda.so exports it as a unique symbol), whose only member
// is the SyncDebugMode enum (an int: 0 off, 1 warn, 2 error). That layout is the pinned torch's;
// a test checks it there by torch's own warning function.
//
// Threading: any thread (torch reads the mode without a lock, as its own setter writes it).
#pragma once

#include <string>

namespace loom {

// Turns the warnings on, or off again (each on with its off: the last off restores the mode torch
// had before the first on, torch.cuda.set_sync_debug_mode's where an embedding script set one).
// Returns false, with why, where torch's CUDA library is not loaded or has no such switch
// (nothing changes then).
bool set_cuda_sync_warnings(bool on, std::string* why_not = nullptr);

// The message of torch's warning (c10/cuda/CUDAFunctions.cpp, warn_or_error_on_sync).
inline const std::string& cuda_sync_warning_text() {
  static const std::string text = "called a synchronizing CUDA operation";
  return text;
}

}  // namespace loom
