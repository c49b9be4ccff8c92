// SIGTERM, SIGINT and SIGHUP, the signals that stop a command, from the process's first
// instruction on. The `loom` front (front.cpp) holds them (blocks them) before anything else
// runs, LibTorch's loading included; the chosen command then says what they do, and a signal
// that came during start-up acts at that moment: none is lost, and none stays held for good.
//
// - `loom launch` and `loom data-worker` keep them blocked and take them with sigtimedwait;
// - `loom train` and `loom ps-server` end on them at once with 128 + N and a message
//   (end_on_stop_signals), except SIGTERM once catch_termination() takes it (core/termination.h);
// - every other command releases them before it runs: they act as they would have without the
//   hold (by default, they end the process).
//
// The state here is process-wide, as signal masks and handlers are; main() sets it once.
#pragma once

#include <signal.h>

#include <string>

namespace loom::cli {

// SIGTERM, SIGINT and SIGHUP.
sigset_t stop_signals();

// The mask the process started with, before the front's hold: what processes it starts get.
void set_start_signal_mask(const sigset_t& mask);
const sigset_t& start_signal_mask();

// Installs, for each stop signal the process did not inherit ignored (as under nohup), a handler
// that ends the process at once with 128 + N and "loom COMMAND: got SIGX while ACTIVITY; ending
// now" on stderr (SIGINT without it in a rank `loom launch` started: the launcher says why it
// stopped its ranks). `command` is a string literal. Leaves the signals held.
void end_on_stop_signals(const char* command);
// What the command is doing, for that message: a string literal, "starting" until set.
void set_stop_activity(const char* activity);

// Unblocks, in the calling thread, the stop signals that were not blocked when the process
// started: a held one acts now.
void release_stop_signals();

// A pending stop signal, taken without waiting; 0 when there is none. For commands that keep
// them blocked.
int take_stop_signal();

// "SIGTERM".
std::string signal_name(int sig);

}  // namespace loom::cli
