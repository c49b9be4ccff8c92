// `loom data-worker`: serves training batches to trainers on other hosts (data.remote.workers)
// until SIGTERM, SIGINT or SIGHUP, which stop it within a second (status 0): requests in flight
// fail, and their trainers take those batches elsewhere. One that comes while it starts stops it
// before it serves. With --exit-when-idle it also stops once the trainers that came are gone (how
// a cluster's worker hosts end with its training).
#include <signal.h>

#include <cstdio>
#include <fstream>

#include "loom/cli/commands.h"
#include "loom/cli/stop_signals.h"
#include "loom/core/caching_allocator.h"
#include "loom/core/error.h"
#include "loom/core/keyed_hash.h"
#include "loom/core/topology.h"
#include "loom/data/remote/data_worker.h"

namespace loom::cli {
namespace {

struct DataWorkerArgs {
  std::string listen;
  std::vector<std::string> data_roots;
  int threads = 0;
  std::string token_file, tls_cert, tls_key, port_file;
  int report_every_s = 30;
  int exit_when_idle_s = 0;
  int corrupt_every = 0;
};

int run_data_worker(const DataWorkerArgs& args) {
  // The stop signals are taken by sigtimedwait below, not by whichever server thread they would
  // land on: they stay blocked, as the front has held them since the process started.
  const sigset_t stop = stop_signals();
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);
  // Batches and their replies are megabytes each, every one the size of the last.
  keep_freed_malloc_memory();
  data::DataWorkerOptions options;
  options.listen = args.listen;
  options.data_roots = args.data_roots;
  options.threads = args.threads > 0 ? args.threads : detect_topology().usable_cores;
  if (!args.token_file.empty()) options.token = read_token_file(args.token_file, "--token-file");
  if (!args.tls_cert.empty()) options.tls_cert = read_user_file(args.tls_cert, "--tls-cert");
  if (!args.tls_key.empty()) options.tls_key = read_user_file(args.tls_key, "--tls-key");
  options.report_every = std::chrono::seconds(args.report_every_s);
  options.corrupt_every = args.corrupt_every;

  if (const int sig = take_stop_signal()) {
    std::fprintf(stderr, "loom data-worker: got %s while starting; stopping\n",
                 signal_name(sig).c_str());
    return 0;
  }
  data::DataWorker worker(options);
  const std::string host = args.listen.substr(0, args.listen.rfind(':'));
  std::printf("loom data-worker: listening on %s:%d, %d build threads, %s%s\n", host.c_str(),
              worker.port(), options.threads, options.token.empty() ? "no token" : "token required",
              options.tls_cert.empty() ? "" : ", TLS");
  std::fflush(stdout);
  if (!args.port_file.empty()) {
    std::ofstream(args.port_file + ".tmp") << worker.port() << "\n";
    std::rename((args.port_file + ".tmp").c_str(), args.port_file.c_str());
  }
  const auto idle_limit = std::chrono::seconds(args.exit_when_idle_s);
  for (;;) {
    const timespec poll{1, 0};
    if (const int sig = sigtimedwait(&stop, nullptr, &poll); sig > 0) {
      std::fprintf(stderr, "loom data-worker: stopping on %s\n", signal_name(sig).c_str());
      break;
    }
    const auto idle = worker.idle_for();
    if (args.exit_when_idle_s > 0 && idle && *idle >= idle_limit) {
      std::fprintf(stderr, "loom data-worker: no trainer asked for anything in %d s: stopping\n",
                   args.exit_when_idle_s);
      break;
    }
  }
  worker.shutdown(std::chrono::milliseconds(300));
  return 0;
}

}  // namespace

Command add_data_worker_command(CLI::App& app) {
  auto args = std::make_shared<DataWorkerArgs>();
  CLI::App* sub = app.add_subcommand(
      "data-worker", "Serve training batches to trainers on other hosts (data.remote.workers)");
  sub->add_option("--listen", args->listen, "Address to bind, HOST:PORT (port 0: any free one)")
      ->required();
  sub->add_option("--data-root", args->data_roots,
                  "A folder the worker may read (repeatable); trainers' data paths must lie in one")
      ->required()
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  sub->add_option("--threads", args->threads, "Batches built at once (default: usable cores)");
  sub->add_option("--token-file", args->token_file,
                  "Shared secret clients must prove (challenge-response) before anything is read");
  sub->add_option("--tls-cert", args->tls_cert, "PEM certificate: serve over TLS");
  sub->add_option("--tls-key", args->tls_key, "PEM private key of --tls-cert");
  sub->add_option("--port-file", args->port_file, "Write the bound port to this file");
  sub->add_option("--report-every", args->report_every_s, "Seconds between rate lines in the log")
      ->check(CLI::PositiveNumber);
  sub->add_option("--exit-when-idle", args->exit_when_idle_s,
                  "Once trainers came, exit when none asked for anything for this many seconds "
                  "(0: serve until SIGTERM)")
      ->check(CLI::NonNegativeNumber);
  sub->add_option("--corrupt-every", args->corrupt_every,
                  "Testing: flip a byte in every N-th batch sent (checks the trainers' CRC)")
      ->group("");  // hidden from --help
  return {sub, [args] { return run_data_worker(*args); }, /*handles_stop_signals=*/true};
}

}  // namespace loom::cli
