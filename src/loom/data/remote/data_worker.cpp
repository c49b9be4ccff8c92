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
#include "loom/data/remote/fair_queue.h"
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

// A failed call's status, the error's fields in its details (remote::ErrorDetails) so that the
// trainer can raise an error with the same fields.
grpc::Status error_status(grpc::StatusCode code, const std::string& message,
                          const ErrorFields& fields) {
  remote::ErrorDetails details;
  details.mutable_fields()->insert(fields.begin(), fields.end());
  return {code, message, details.SerializeAsString()};
}

// Challenge and Open run on gRPC's handler threads. GetBatch is a raw callback method: its
// handler only queues the request, and the worker's own build threads take the queue fairly
// between sessions, build the batch and answer with a buffer over the batch's own memory.
class Service final
    : public remote::DataWorker::WithRawCallbackMethod_GetBatch<remote::DataWorker::Service> {
 public:
  explicit Service(const DataWorkerOptions& options) : options_(options) {
    for (int i = 0; i < options.threads; ++i) {
      builders_.emplace_back([this] {
        while (std::optional<FairQueue::Job> job = queue_.pop()) (*job)(true);
      });
    }
  }
  ~Service() override { stop(); }

  // Answers what is queued with UNAVAILABLE and waits for the batches being built.
  void stop() {
    queue_.stop();
    for (std::thread& t : builders_) {
      if (t.joinable()) t.join();
    }
  }

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
                        ", this worker speaks " + std::to_string(kDataProtocolVersion),
                    {{"problem", "protocol"},
                     {"value", std::to_string(request->protocol())},
                     {"expected", std::to_string(kDataProtocolVersion)}});
    }
    if (!options_.token.empty() && !proves_token(*request)) {
      return refuse(grpc::StatusCode::UNAUTHENTICATED, peer, "wrong or missing token",
                    {{"problem", "token"}});
    }
    if (request->world() < 1 || request->rank() < 0 || request->rank() >= request->world()) {
      return refuse(grpc::StatusCode::INVALID_ARGUMENT, peer,
                    "rank " + std::to_string(request->rank()) + " of world " +
                        std::to_string(request->world()),
                    {{"problem", "rank"},
                     {"rank", std::to_string(request->rank())},
                     {"world", std::to_string(request->world())}});
    }
    Config config;
    try {
      config = parse_remote_config(request->config());
    } catch (const ConfigError& e) {
      return refuse(grpc::StatusCode::INVALID_ARGUMENT, peer, e.what(), e.fields());
    }
    try {
      check_under_roots(config, options_.data_roots);
    } catch (const DataError& e) {
      return refuse(grpc::StatusCode::PERMISSION_DENIED, peer, e.what(), e.fields());
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
      opened = sessions_.open(std::move(session), request->config(), [&] {
        return std::shared_ptr<const LocalBatchSource>(make_training_batches(
            config, config.data.batch_size, request->rank(), request->world()));
      });
    } catch (const Error& e) {
      return refuse(grpc::StatusCode::FAILED_PRECONDITION, peer, e.what(), e.fields());
    }
    const LocalBatchSource& loader = *opened->loader;
    LOOM_LOG(kInfo, kLog) << "opened a session for " << describe(*opened) << ": "
                          << config.data.source << " data, " << loader.samples() << " samples, "
                          << loader.steps_per_epoch() << " batches per epoch"
                          << (opened->lz4 ? ", LZ4" : "");
    reply->set_session(opened->id);
    reply->set_steps_per_epoch(loader.steps_per_epoch());
    reply->set_samples(loader.samples());
    reply->set_threads(static_cast<int>(builders_.size()));
    return grpc::Status::OK;
  }

  grpc::ServerUnaryReactor* GetBatch(grpc::CallbackServerContext* context,
                                     const grpc::ByteBuffer* request_bytes,
                                     grpc::ByteBuffer* response) override {
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    remote::BatchRequest request;
    std::vector<grpc::Slice> slices;
    std::string bytes;
    if (request_bytes->Dump(&slices).ok()) {
      for (const grpc::Slice& slice : slices) {
        bytes.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
      }
    }
    if (!request.ParseFromString(bytes)) {
      reactor->Finish({grpc::StatusCode::INVALID_ARGUMENT, "malformed batch request"});
      return reactor;
    }
    std::shared_ptr<WorkerSession> session = sessions_.find(request.session());
    if (!session) {
      reactor->Finish(
          {grpc::StatusCode::NOT_FOUND,
           "unknown session: open one (this worker may have restarted or closed it as idle)"});
      return reactor;
    }
    const int64_t steps = session->loader->steps_per_epoch();
    if (request.epoch() < 0 || request.step() < 0 || request.step() >= steps) {
      reactor->Finish({grpc::StatusCode::OUT_OF_RANGE,
                       "batch " + std::to_string(request.step()) + " of epoch " +
                           std::to_string(request.epoch() + 1) + ": an epoch has " +
                           std::to_string(steps) + " batches"});
      return reactor;
    }
    queue_.push(session->id, [this, context, reactor, response, session, request](bool run) {
      if (!run) {
        reactor->Finish({grpc::StatusCode::UNAVAILABLE, "the worker is shutting down"});
      } else if (context->IsCancelled() || context->deadline() < std::chrono::system_clock::now()) {
        reactor->Finish({grpc::StatusCode::DEADLINE_EXCEEDED, "the trainer stopped waiting"});
      } else {
        try {
          reactor->Finish(build(*session, request, *response));
        } catch (const std::exception& e) {
          // Out of memory, say: this request fails, and the worker goes on.
          LOOM_LOG(kWarn, kLog) << describe(*session) << ": batch " << request.step()
                                << " of epoch " << request.epoch() + 1 << ": " << e.what();
          reactor->Finish({grpc::StatusCode::INTERNAL, e.what()});
        }
      }
    });
    return reactor;
  }

 private:
  grpc::Status build(WorkerSession& session, const remote::BatchRequest& request,
                     grpc::ByteBuffer& response) {
    const auto begin = Clock::now();
    Batch batch;
    LoaderStats tally;
    try {
      batch = session.loader->build_batch(request.epoch(), request.step(), &tally);
    } catch (const Error& e) {  // the data itself (the trainer would fail the same way)
      LOOM_LOG(kWarn, kLog) << describe(session) << ": batch " << request.step() << " of epoch "
                            << request.epoch() + 1 << " failed: " << e.what();
      return error_status(grpc::StatusCode::FAILED_PRECONDITION, e.what(), e.fields());
    }
    const double seconds = std::chrono::duration<double>(Clock::now() - begin).count();
    const bool corrupt = options_.corrupt_every > 0 && ++replies_ % options_.corrupt_every == 0;
    response =
        pack_batch(batch, request.epoch(), request.step(), tally, seconds, session.lz4, corrupt);
    // What the inputs take on the wire: the whole reply less its few hundred bytes of fields.
    sessions_.record(session, static_cast<int64_t>(response.Length()), seconds);
    return grpc::Status::OK;
  }

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

  static grpc::Status refuse(grpc::StatusCode code, const std::string& peer, const std::string& why,
                             const ErrorFields& fields = {}) {
    LOOM_LOG(kWarn, kLog) << "refused a client from " << peer << ": " << why;
    return error_status(code, why, fields);
  }

  const DataWorkerOptions& options_;
  FairQueue queue_;
  std::vector<std::thread> builders_;
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
                    " (address not local, port in use, or malformed)",
                {{"problem", "cannot_listen"}, {"value", m.options.listen}});
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
  m.service->stop();
  m.server->Shutdown(std::chrono::system_clock::now() + grace);
  m.reporter.join();
  for (const auto& line : m.service->sessions().summary()) {
    LOOM_LOG(kInfo, kLog) << "at shutdown: " << line;
  }
}

void DataWorker::wait() { impl_->server->Wait(); }

std::optional<std::chrono::steady_clock::duration> DataWorker::idle_for() const {
  return impl_->service->sessions().idle_for();
}

}  // namespace loom::data
