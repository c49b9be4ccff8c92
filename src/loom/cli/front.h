// The contract between the `loom` executable (front.cpp, which links nothing but libc) and the
// CLI it loads, libloom_cli.so (every other file of cli/, with libloom and LibTorch).
#pragma once

#include <signal.h>

// The CLI's main(): parses the command line and runs the chosen subcommand. `start_mask` is the
// signal mask the process started with, before the front held SIGTERM, SIGINT and SIGHUP (which
// are blocked when it is called); see cli/stop_signals.h.
extern "C" int loom_cli_main(int argc, char** argv, const sigset_t* start_mask);
