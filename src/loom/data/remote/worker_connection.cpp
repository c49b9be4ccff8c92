#include "loom/data/remote/worker_connection.h"

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <condition_variable>

#include "loom/core/keyed_hash.h"
#include "loom/data/remote/data_service.grpc.pb.h"

namespace loom::data {
namespace {

constexpr int kMaxFrameBytes = (1 << 24) - 1;  // HTTP/2's largest
constexpr int kLookaheadBytes = 64 << 20;
// data_service.proto's DataWorker.GetBatch, as gRPC names it on the wire.
const std::string kGetBatchMethod = "/loom.remote.DataWorker/GetBatch";

std::shared_ptr<grpc::Channel> make_channel(const std::string& address, const std::string& tls_ca) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);  // batches are tens of MB
  // Reconnection is RemoteBatchSource's business: every open() makes a new channel with its own
  // connection (not one shared with earlier channels), so a worker that came up is seen at once
  // rather than after gRPC's backoff on the old connection.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  // Batches are megabytes: large HTTP/2 frames and a window that holds whole batches, instead
  // of 16 KB frames behind a 64 KB window that the sender must wait on many times per batch.
  args.SetInt(GRPC_ARG_HTTP2_MAX_FRAME_SIZE, kMaxFrameBytes);
  args.SetInt(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, kLookaheadBytes);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  std::shared_ptr<grpc::ChannelCredentials> credentials = grpc::InsecureChannelCredentials();
  if (!tls_ca.empty()) {
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = tls_ca;
    credentials = grpc::SslCredentials(ssl);
  }
  return grpc::CreateCustomChannel(address, credentials, args);
}

bool is_refusal(grpc::StatusCode code) {
  return code == grpc::StatusCode::UNAUTHENTICATED || code == grpc::StatusCode::PERMISSION_DENIED ||
         code == grpc::StatusCode::INVALID_ARGUMENT ||
         code == grpc::StatusCode::FAILED_PRECONDITION;
}

std::string describe(const grpc::Status& status) {
  switch (status.error_code()) {
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return "no answer before the timeout";
    case grpc::StatusCode::UNAVAILABLE:
      return "unreachable (" + status.error_message() + ")";
    case grpc::StatusCode::CANCELLED:
      return "cancelled";
    default:
      return status.error_message();
  }
}

// The worker's error fields, sent in the status details (data_worker.cpp's error_status).
ErrorFields fields_of(const grpc::Status& status) {
  remote::ErrorDetails details;
  if (status.error_details().empty() || !details.ParseFromString(status.error_details())) return {};
  return ErrorFields(details.fields().begin(), details.fields().end());
}

}  // namespace

WorkerConnection::Tracked::Tracked(WorkerConnection& owner, grpc::ClientContext& context)
    : owner_(owner), context_(context) {
  std::lock_guard<std::mutex> lock(owner_.mutex_);
  if (owner_.closed_) throw WorkerUnavailable("closed");
  owner_.in_flight_.insert(&context_);
}

WorkerConnection::Tracked::~Tracked() {
  std::lock_guard<std::mutex> lock(owner_.mutex_);
  owner_.in_flight_.erase(&context_);
}

WorkerConnection::WorkerConnection(std::string address, ConnectionOptions options)
    : address_(std::move(address)), options_(std::move(options)) {}

WorkerConnection::~WorkerConnection() = default;

int WorkerConnection::threads() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return threads_;
}

std::shared_ptr<grpc::Channel> WorkerConnection::channel() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return channel_;
}

void WorkerConnection::open() {
  auto fresh = make_channel(address_, options_.tls_ca);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    channel_ = fresh;
  }
  auto stub = remote::DataWorker::NewStub(fresh);
  const auto deadline = std::chrono::system_clock::now() + options_.timeout;
  grpc::ClientContext challenge_context;
  challenge_context.set_deadline(deadline);
  remote::ChallengeRequest challenge_request;
  challenge_request.set_protocol(kDataProtocolVersion);
  remote::ChallengeReply challenge;
  grpc::Status status;
  {
    Tracked tracked(*this, challenge_context);
    status = stub->Challenge(&challenge_context, challenge_request, &challenge);
  }
  if (!status.ok()) throw WorkerUnavailable(describe(status));
  if (challenge.token_required() && options_.token.empty()) {
    throw WorkerRefused("it requires a token and data.remote.token_file is not set",
                        {{"key", "data.remote.token_file"}, {"problem", "token_required"}});
  }

  remote::OpenRequest request;
  request.set_protocol(kDataProtocolVersion);
  request.set_challenge(challenge.challenge());
  if (!options_.token.empty()) {
    request.set_proof(hmac_sha256(options_.token, challenge.challenge()));
  }
  request.set_client(options_.client);
  request.set_config(options_.config);
  request.set_rank(options_.rank);
  request.set_world(options_.world);
  request.set_lz4(options_.lz4);
  grpc::ClientContext open_context;
  open_context.set_deadline(deadline);
  remote::OpenReply reply;
  {
    Tracked tracked(*this, open_context);
    status = stub->Open(&open_context, request, &reply);
  }
  if (!status.ok()) {
    if (is_refusal(status.error_code())) {
      throw WorkerRefused(status.error_message(), fields_of(status));
    }
    throw WorkerUnavailable(describe(status));
  }
  if (reply.steps_per_epoch() != options_.steps_per_epoch || reply.samples() != options_.samples) {
    throw WorkerRefused(
        "its data differs: " + std::to_string(reply.samples()) + " samples in " +
            std::to_string(reply.steps_per_epoch()) + " batches per epoch, this rank has " +
            std::to_string(options_.samples) + " in " + std::to_string(options_.steps_per_epoch),
        {{"problem", "data_differs"},
         {"samples", std::to_string(reply.samples())},
         {"steps_per_epoch", std::to_string(reply.steps_per_epoch())},
         {"expected_samples", std::to_string(options_.samples)},
         {"expected_steps_per_epoch", std::to_string(options_.steps_per_epoch)}});
  }
  std::lock_guard<std::mutex> lock(mutex_);
  session_ = reply.session();
  threads_ = std::max(1, reply.threads());
}

Batch WorkerConnection::fetch(const BatchShape& shape, LoaderStats& tally, int64_t& wire_bytes) {
  remote::BatchRequest request;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    request.set_session(session_);
  }
  request.set_epoch(shape.epoch);
  request.set_step(shape.step);
  const grpc::Slice request_slice(request.SerializeAsString());
  const grpc::ByteBuffer request_buffer(&request_slice, 1);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + options_.timeout);
  // A generic call, so that the reply stays in the slices gRPC received it in: unpack_batch
  // copies the images from there into their tensor once.
  grpc::ByteBuffer reply;
  // Shared with gRPC's completion callback, which may still be returning (on its own thread)
  // when this one has seen `done` and moved on.
  struct Completion {
    std::mutex mutex;
    std::condition_variable finished;
    bool done = false;
    grpc::Status status;
  };
  auto completion = std::make_shared<Completion>();
  {
    Tracked tracked(*this, context);
    grpc::GenericStub stub(channel());
    stub.UnaryCall(&context, kGetBatchMethod, grpc::StubOptions(), &request_buffer, &reply,
                   [completion](grpc::Status s) {
                     std::lock_guard<std::mutex> lock(completion->mutex);
                     completion->status = std::move(s);
                     completion->done = true;
                     completion->finished.notify_all();
                   });
    // The context's deadline bounds the call: gRPC completes it by then.
    std::unique_lock<std::mutex> lock(completion->mutex);
    completion->finished.wait(lock, [&] { return completion->done; });
    const grpc::Status status = completion->status;
    if (!status.ok()) {
      if (status.error_code() == grpc::StatusCode::FAILED_PRECONDITION) {
        ErrorFields fields = fields_of(status);
        fields["worker"] = address_;
        throw DataError("data worker " + address_ + ": " + status.error_message(),
                        std::move(fields));
      }
      throw WorkerUnavailable(describe(status));
    }
  }
  wire_bytes = static_cast<int64_t>(reply.Length());
  return unpack_batch(reply, options_.lz4, shape, tally);
}

void WorkerConnection::cancel_all() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (grpc::ClientContext* context : in_flight_) context->TryCancel();
}

void WorkerConnection::close() {
  std::lock_guard<std::mutex> lock(mutex_);
  closed_ = true;
  for (grpc::ClientContext* context : in_flight_) context->TryCancel();
}

}  // namespace loom::data
