// The data worker faces the network: malformed, oversized and out-of-range requests get clean
// errors (gRPC statuses), and the worker goes on serving. TLS works with the trainer's CA.
#include "loom/data/remote/data_worker.h"

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <thread>

#include "loom/core/config.h"
#include "loom/data/configured_loaders.h"
#include "loom/data/remote/data_service.grpc.pb.h"
#include "loom/data/remote/remote_batch_source.h"
#include "loom/data/remote/remote_config.h"
#include "tools/test_support.h"

namespace loom::data {
namespace {

DataWorkerOptions worker_options(const std::string& root) {
  DataWorkerOptions o;
  o.listen = "127.0.0.1:0";
  o.data_roots = {root};
  return o;
}

std::shared_ptr<grpc::Channel> channel_to(int port) {
  grpc::ChannelArguments args;
  args.SetMaxSendMessageSize(-1);
  args.SetMaxReceiveMessageSize(-1);
  return grpc::CreateCustomChannel("127.0.0.1:" + std::to_string(port),
                                   grpc::InsecureChannelCredentials(), args);
}

// A refusal's "problem" field, from the status details the worker sends with it.
std::string problem_of(const grpc::Status& status) {
  remote::ErrorDetails details;
  if (!details.ParseFromString(status.error_details())) return "unparsable details";
  const auto it = details.fields().find("problem");
  return it == details.fields().end() ? "" : it->second;
}

// Sends `bytes` as the request of `method` without parsing them first.
grpc::Status call_raw(const std::shared_ptr<grpc::Channel>& channel, const std::string& method,
                      const std::string& bytes) {
  grpc::GenericStub stub(channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  grpc::Slice slice(bytes);
  grpc::ByteBuffer request(&slice, 1), response;
  grpc::Status status;
  std::mutex mutex;
  std::condition_variable done;
  bool finished = false;
  stub.UnaryCall(&context, method, grpc::StubOptions(), &request, &response, [&](grpc::Status s) {
    std::lock_guard<std::mutex> lock(mutex);
    status = s;
    finished = true;
    done.notify_all();
  });
  std::unique_lock<std::mutex> lock(mutex);
  done.wait(lock, [&] { return finished; });
  return status;
}

Config small_config() {
  return parse_config(
      "", "test",
      {"data=synthetic", "data.image_size=8", "data.train_samples=32", "data.batch_size=8"});
}

// A session opened by hand; returns its id.
std::string open_session(remote::DataWorker::Stub& stub, const Config& config) {
  grpc::ClientContext context;
  remote::OpenRequest request;
  request.set_protocol(kDataProtocolVersion);
  request.set_config(remote_config_text(config, config.data.batch_size));
  request.set_world(1);
  remote::OpenReply reply;
  EXPECT_TRUE(stub.Open(&context, request, &reply).ok());
  return reply.session();
}

TEST(DataWorker, MalformedRequestsGetErrorsAndTheWorkerGoesOn) {
  test::TempDir root;
  DataWorker worker(worker_options(root.path()));
  auto channel = channel_to(worker.port());
  const std::string garbage = "\xff\xff\xff\xff\x0f\x12\x34 not a protobuf";
  for (const char* method : {"/loom.remote.DataWorker/Open", "/loom.remote.DataWorker/GetBatch",
                             "/loom.remote.DataWorker/Challenge"}) {
    const grpc::Status status = call_raw(channel, method, garbage);
    EXPECT_FALSE(status.ok()) << method;
  }
  // More than the worker's 1 MB request limit.
  remote::OpenRequest huge;
  huge.set_protocol(kDataProtocolVersion);
  huge.set_config(std::string(2 << 20, 'x'));
  EXPECT_EQ(
      call_raw(channel, "/loom.remote.DataWorker/Open", huge.SerializeAsString()).error_code(),
      grpc::StatusCode::RESOURCE_EXHAUSTED);

  auto stub = remote::DataWorker::NewStub(channel);
  auto open_with = [&](const std::string& config, int rank, int world, uint32_t protocol) {
    grpc::ClientContext context;
    remote::OpenRequest request;
    request.set_protocol(protocol);
    request.set_config(config);
    request.set_rank(rank);
    request.set_world(world);
    remote::OpenReply reply;
    return stub->Open(&context, request, &reply);
  };
  const std::string good = remote_config_text(small_config(), small_config().data.batch_size);
  grpc::Status s = open_with("data: [unclosed", 0, 1, kDataProtocolVersion);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(problem_of(s), "not_yaml") << s.error_message();
  s = open_with(good, 3, 2, kDataProtocolVersion);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(problem_of(s), "rank") << s.error_message();
  s = open_with(good, 0, 1, kDataProtocolVersion + 7);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(problem_of(s), "protocol") << s.error_message();

  const std::string session = open_session(*stub, small_config());
  auto get = [&](const std::string& id, int64_t epoch, int64_t step) {
    grpc::ClientContext context;
    remote::BatchRequest request;
    request.set_session(id);
    request.set_epoch(epoch);
    request.set_step(step);
    remote::BatchReply reply;
    return stub->GetBatch(&context, request, &reply);
  };
  EXPECT_EQ(get("no such session", 0, 0).error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(get(session, 0, 4).error_code(), grpc::StatusCode::OUT_OF_RANGE);  // 4 steps: 0..3
  EXPECT_EQ(get(session, -1, 0).error_code(), grpc::StatusCode::OUT_OF_RANGE);
  EXPECT_TRUE(get(session, 5, 3).ok());  // and it still serves
}

TEST(DataWorker, ServesOverTlsToATrainerThatTrustsItsCertificate) {
  test::TempDir dir;
  const auto made = test::run_command(
      "openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=localhost "
      "-addext subjectAltName=IP:127.0.0.1 -keyout " +
      (dir / "key.pem") + " -out " + (dir / "cert.pem"));
  if (made.exit_code != 0) GTEST_SKIP() << "openssl could not make a certificate: " << made.output;
  DataWorkerOptions o = worker_options(dir.path());
  o.tls_cert = test::read_text(dir / "cert.pem");
  o.tls_key = test::read_text(dir / "key.pem");
  DataWorker worker(o);
  const Config config = small_config();
  RemoteSourceOptions options;
  options.workers = {"127.0.0.1:" + std::to_string(worker.port())};
  options.local_threads = 0;
  options.connection.config = remote_config_text(config, config.data.batch_size);
  options.connection.timeout = std::chrono::milliseconds(5000);
  {
    options.connection.tls_ca = o.tls_cert;
    RemoteBatchSource source(
        make_loaders(config, config.data.batch_size, 1, 0, 1, false, false).train, options);
    EXPECT_EQ(source.worker_stats()[0].state, "up") << source.worker_stats()[0].last_error;
    const Batch batch = source.batch(0, 1);
    EXPECT_TRUE(
        batch.inputs.equal(make_loaders(config, config.data.batch_size, 1, 0, 1, false, false)
                               .train->build_batch(0, 1)
                               .inputs));
    EXPECT_GE(source.worker_stats()[0].batches, 1);
  }
  options.connection.tls_ca = "";  // plaintext to a TLS port gets nowhere
  RemoteBatchSource plaintext(
      make_loaders(config, config.data.batch_size, 1, 0, 1, false, false).train, options);
  EXPECT_NE(plaintext.worker_stats()[0].state, "up");
}

}  // namespace
}  // namespace loom::data
