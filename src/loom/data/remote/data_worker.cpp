#include "loom/data/remote/data_worker.h"

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>

#include "loom/core/error.h"
#include "loom/core/keyed_hash.h"
#include "loom/core/log.h"
#include "loom/data/configured_loaders.h"
#include "loom/data/remote/batch_wire.h"
#include "loom/data/remote/data_service.grpc.pb.h"
#include "loom/data/remote/fair_slots.h"
#include "loom/data/remote/remote_config.h"
#include "loom/data/remote/worker_sessions.h"
#include "loom/data/sample_error.h"

namespace loom::data {
namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kChallengeLife = std::chrono::minutes(1);
constexpr size_t kMaxChallenges = 4096;  // outstanding at once; the oldest go first
constexpr int kMaxRequestBytes = 1 << 20;
constexpr const char* kLog = "data-worker";

class Service final : public remote::DataWorker::Service {
 public:
  explicit Service(const DataWorkerOptions& options) : options_(options), slots_(options.threads) {}

  FairSlots& slots() { return slots_; }
  WorkerSessions& sessions() { return sessions_; }

  grpc::Status Challenge(grpc::ServerContext*, const remote::ChallengeRequest*,
                         remote::ChallengeReply* reply) override {
    const std::string challenge = random_bytes(32);
    {
      std::lock_guard<std::mutex> lock(challenge_mutex_);
      const auto now = Clock::now();
      for (auto it = challenges_.begin(); it != challenges_.end();) {
        it = it->second < now ? challenges_.erase(it) : std::next(it);
      }
      while (challenges_.size() >= kMaxChallenges) challenges_.erase(challenges_.begin());
      challenges_[challenge] = now + kChallengeLife;
    }
    reply->set_challenge(challenge);
    reply->set_protocol(kDataProtocolVersion);
    reply->set_token_required(!options_.token.empty());
    return grpc::Status::OK;
  }

  grpc::Status Open(grpc::ServerContext* context, const remote::OpenRequest* request,
                    remote::OpenReply* reply) override {
    const std::string peer = context->peer();
    if (request->protocol() != kDataProtocolVersion) {
      return refuse(grpc::StatusCode::FAILED_PRECONDITION, peer,
                    "protocol version " + std::to_string(request->protocol()) +
                        ", this worker speaks " + std::to_string(kDataProtocolVersion));
    }
    if (!options_.token.empty() && !proves_token(*request)) {
      return refuse(grpc::StatusCode::UNAUTHENTICATED, peer, "wrong or missing token");
    }
    if (request->world() < 1 || request->rank() < 0 || request->rank() >= request->world()) {
      return refuse(grpc::StatusCode::INVALID_ARGUMENT, peer,
                    "rank " + std::to_string(request->rank()) + " of world " +
                        std::to_string(request->world()));
    }
    Config config;
    try {
      config = parse_remote_config(request->config());
    } catch (const ConfigError& e) {
      return refuse(grpc::StatusCode::INVALID_ARGUMENT, peer, e.what());
    }
    try {
      check_under_roots(config, options_.data_roots);
    } catch (const DataError& e) {
      return refuse(grpc::StatusCode::PERMISSION_DENIED, peer, e.what());
    }
    WorkerSession session;
    session.id = random_bytes(16);
    session.client = request->client().substr(0, 200);
    session.peer = peer;
    session.rank = request->rank();
    session.world = request->world();
    session.lz4 = request->lz4();
    std::shared_ptr<WorkerSession> opened;
    try {
      config.data.workers = 1;  // the loader's own threads stay idle: handlers build batches
      opened = sessions_.open(std::move(session), request->config(), [&] {
        return std::shared_ptr<const Loader>(
            make_loaders(config, 1, request->rank(), request->world(), false, false).train);
      });
    } catch (const Error& e) {
      return refuse(grpc::StatusCode::FAILED_PRECONDITION, peer, e.what());
    }
    const Loader& loader = *opened->loader;
    LOOM_LOG(kInfo, kLog) << "opened a session for " << describe(*opened) << ": "
                          << config.data.source << " data, " << loader.samples() << " samples, "
                          << loader.steps_per_epoch() << " batches per epoch"
                          << (opened->lz4 ? ", LZ4" : "");
    reply->set_session(opened->id);
    reply->set_steps_per_epoch(loader.steps_per_epoch());
    reply->set_samples(loader.samples());
    reply->set_threads(slots_.slots());
    return grpc::Status::OK;
  }

  grpc::Status GetBatch(grpc::ServerContext* context, const remote::BatchRequest* request,
                        remote::BatchReply* reply) override {
    std::shared_ptr<WorkerSession> session = sessions_.find(request->session());
    if (!session) {
      return {grpc::StatusCode::NOT_FOUND,
              "unknown session: open one (this worker may have restarted or closed it as idle)"};
    }
    const Loader& loader = *session->loader;
    if (request->epoch() < 0 || request->step() < 0 ||
        request->step() >= loader.steps_per_epoch()) {
      return {grpc::StatusCode::OUT_OF_RANGE,
              "batch " + std::to_string(request->step()) + " of epoch " +
                  std::to_string(request->epoch() + 1) + ": an epoch has " +
                  std::to_string(loader.steps_per_epoch()) + " batches"};
    }
    const auto deadline =
        std::min(context->deadline(), std::chrono::system_clock::now() + std::chrono::minutes(10));
    if (!slots_.acquire(session->id,
                        Clock::now() + (deadline - std::chrono::system_clock::now()))) {
      return {grpc::StatusCode::UNAVAILABLE, "no build slot before the deadline or shutting down"};
    }
    struct Release {
      FairSlots& slots;
      ~Release() { slots.release(); }
    } release{slots_};
    const auto begin = Clock::now();
    Batch batch;
    LoaderStats tally;
    try {
      batch = loader.build_batch(request->epoch(), request->step(), &tally);
    } catch (const Error& e) {  // the data itself (the trainer would fail the same way)
      LOOM_LOG(kWarn, kLog) << describe(*session) << ": batch " << request->step() << " of epoch "
                            << request->epoch() + 1 << " failed: " << e.what();
      return {grpc::StatusCode::FAILED_PRECONDITION, e.what()};
    }
    const double seconds = std::chrono::duration<double>(Clock::now() - begin).count();
    reply->set_epoch(request->epoch());
    reply->set_step(request->step());
    pack_batch(batch, tally, seconds, session->lz4, *reply);
    if (options_.corrupt_every > 0 && ++replies_ % options_.corrupt_every == 0 &&
        !reply->images().empty()) {
      (*reply->mutable_images())[0] ^= 0x5A;
    }
    sessions_.record(*session, static_cast<int64_t>(reply->images().size()), seconds);
    return grpc::Status::OK;
  }

 private:
  bool proves_token(const remote::OpenRequest& request) {
    {
      std::lock_guard<std::mutex> lock(challenge_mutex_);
      auto it = challenges_.find(request.challenge());
      if (it == challenges_.end() || it->second < Clock::now()) return false;
      challenges_.erase(it);  // good for one Open
    }
    return equal_in_constant_time(request.proof(),
                                  hmac_sha256(options_.token, request.challenge()));
  }

  static grpc::Status refuse(grpc::StatusCode code, const std::string& peer,
                             const std::string& why) {
    LOOM_LOG(kWarn, kLog) << "refused a client from " << peer << ": " << why;
    return {code, why};
  }

  const DataWorkerOptions& options_;
  FairSlots slots_;
  WorkerSessions sessions_;
  std::mutex challenge_mutex_;
  std::map<std::string, Clock::time_point> challenges_;  // issued, not yet used; with expiry
  std::atomic<int64_t> replies_{0};
};

}  // namespace

struct DataWorker::Impl {
  DataWorkerOptions options;
  std::unique_ptr<Service> service;
  std::unique_ptr<grpc::Server> server;
  int port = 0;
  std::mutex mutex;
  std::condition_variable stop_reporting;
  bool stopping = false;
  std::thread reporter;

  // Logs rates every report_every and closes idle sessions.
  void report_loop() {
    std::unique_lock<std::mutex> lock(mutex);
    while (!stop_reporting.wait_for(lock, options.report_every, [&] { return stopping; })) {
      lock.unlock();
      for (const auto& line : service->sessions().rate_report()) LOOM_LOG(kInfo, kLog) << line;
      for (const auto& line : service->sessions().close_idle(options.session_idle)) {
        LOOM_LOG(kInfo, kLog) << line;
      }
      lock.lock();
    }
  }
};

DataWorker::DataWorker(DataWorkerOptions options) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.options = std::move(options);
  if (m.options.data_roots.empty()) throw ConfigError("data-worker: give at least one --data-root");
  if (m.options.tls_cert.empty() != m.options.tls_key.empty()) {
    throw ConfigError("data-worker: TLS needs both --tls-cert and --tls-key");
  }
  m.service = std::make_unique<Service>(m.options);
  std::shared_ptr<grpc::ServerCredentials> credentials = grpc::InsecureServerCredentials();
  if (!m.options.tls_cert.empty()) {
    grpc::SslServerCredentialsOptions ssl;
    ssl.pem_key_cert_pairs.push_back({m.options.tls_key, m.options.tls_cert});
    credentials = grpc::SslServerCredentials(ssl);
  }
  grpc::ServerBuilder builder;
  // gRPC would otherwise set SO_REUSEPORT, letting a second process bind the same port.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.SetMaxReceiveMessageSize(kMaxRequestBytes);
  // Replies are megabytes: HTTP/2's largest frames (the trainer sets a window to match).
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_FRAME_SIZE, (1 << 24) - 1);
  builder.AddListeningPort(m.options.listen, credentials, &m.port);
  builder.RegisterService(m.service.get());
  m.server = builder.BuildAndStart();
  if (!m.server || m.port == 0) {
    throw Error("data-worker: cannot listen on " + m.options.listen +
                " (address not local, port in use, or malformed)");
  }
  m.reporter = std::thread([&m] { m.report_loop(); });
}

DataWorker::~DataWorker() { shutdown(std::chrono::milliseconds(0)); }

int DataWorker::port() const { return impl_->port; }

void DataWorker::shutdown(std::chrono::milliseconds grace) {
  Impl& m = *impl_;
  {
    std::lock_guard<std::mutex> lock(m.mutex);
    if (m.stopping) return;
    m.stopping = true;
  }
  m.stop_reporting.notify_all();
  m.service->slots().stop();
  m.server->Shutdown(std::chrono::system_clock::now() + grace);
  m.reporter.join();
  for (const auto& line : m.service->sessions().summary()) {
    LOOM_LOG(kInfo, kLog) << "at shutdown: " << line;
  }
}

void DataWorker::wait() { impl_->server->Wait(); }

}  // namespace loom::data
