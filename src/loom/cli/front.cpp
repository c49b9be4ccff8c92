// The `loom` executable: holds SIGTERM, SIGINT and SIGHUP from its first instruction, then loads
// the CLI (libloom_cli.so, with libloom and LibTorch) and runs it.
//
// Why a front: LibTorch takes long to start, and a signal in that time would end the process by
// its default action, before any code of ours could say what it was doing. The earliest code an
// executable can run is its .preinit_array, which the dynamic loader calls once it has loaded and
// relocated every library the executable links, before any of their initialisers. For a program
// linked with LibTorch that is some 340 libraries and 20-60 ms of relocation on a 2-core EPYC,
// with the initialisers still to come. So this executable links libc alone (a fraction of a
// millisecond to load), holds the signals in its .preinit_array, and loads the rest with dlopen:
// LibTorch's relocation and initialisers, and every thread they start, run with the signals held
// until the command says what they do (cli/stop_signals.h).
//
// Only a signal that comes before the first instruction takes its default action, which no
// program can prevent: a parent that must not lose one blocks it across exec (posix_spawn's
// POSIX_SPAWN_SETSIGMASK), and the blocked mask then holds it here.
#include "loom/cli/front.h"

#include <dlfcn.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

namespace {

// The mask the process started with, before the hold: the CLI gives it back to the processes it
// starts. Written once, before main, by the only thread there is then.
sigset_t start_mask;

void hold_stop_signals(int, char**, char**) {
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGTERM);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGHUP);
  sigprocmask(SIG_BLOCK, &stop, &start_mask);
}

// Where libloom_cli.so is: LOOM_CLI_MODULE, relative to this executable's folder; the build tree
// lays the two out as an installed tree does. Falls back to the bare name (the library path).
const char* module_path(char* path, size_t size) {
  const ssize_t n = readlink("/proc/self/exe", path, size - 1);
  if (n <= 0) return "libloom_cli.so";
  path[n] = '\0';
  char* slash = strrchr(path, '/');
  if (!slash || static_cast<size_t>(slash - path) + 2 + strlen(LOOM_CLI_MODULE) > size) {
    return "libloom_cli.so";
  }
  strcpy(slash + 1, LOOM_CLI_MODULE);
  return path;
}

}  // namespace

// The dynamic loader calls the executable's .preinit_array before the initialiser of any library,
// libc's included (System V ABI, "Initialization and Termination Functions"). tests/e2e/
// start_signals_test.cpp checks the order with LD_DEBUG=libs.
__attribute__((section(".preinit_array"), used)) static void (*const hold_at_start[])(int, char**,
                                                                                      char**) = {
    hold_stop_signals};

int main(int argc, char** argv) {
  char buffer[PATH_MAX + 64];
  const char* module = module_path(buffer, sizeof buffer);
  // RTLD_GLOBAL and lazy binding, as if the executable linked the module: the libraries it
  // loads later (LibTorch's own, SentencePiece's module) see the same symbols as before.
  void* cli = dlopen(module, RTLD_LAZY | RTLD_GLOBAL);
  void* entry = cli ? dlsym(cli, "loom_cli_main") : nullptr;
  if (!entry) {
    fprintf(stderr, "loom: cannot load the command line interface: %s\n", dlerror());
    sigprocmask(SIG_SETMASK, &start_mask, nullptr);
    return 1;
  }
  return reinterpret_cast<decltype(&loom_cli_main)>(entry)(argc, argv, &start_mask);
}
