// Every thread's call stack, as text: what a hung process was doing, for the stall watchdog.
//
// Each thread of the process is asked in turn (a real-time signal sent with tgkill) to record
// its own return addresses; the caller then names them (dladdr, demangled). A thread that
// blocks the signal, or does not answer within half a second, is listed as such. Functions
// local to a library show as the library and offset (`addr2line -e LIB OFFSET` names them).
// One dump at a time per process; safe to call while other threads are stuck.
#pragma once

#include <string>

namespace loom {

std::string all_thread_stacks();

}  // namespace loom
