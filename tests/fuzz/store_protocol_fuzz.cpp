// The rendezvous store's wire format and request handling: what any client that reaches the
// store's port can send. Decodes messages under both limits the server applies, checks that each
// re-encodes to the bytes it came from, and applies them to a table, as the server would.
#include "fuzz_target.h"
#include "loom/comm/store_table.h"
#include "loom/core/error.h"

using namespace loom::comm;

LOOM_FUZZ_TARGET(store_protocol) {
  std::string input(reinterpret_cast<const char*>(data), size);
  StoreTable table;
  for (std::size_t limit : {store_protocol::kMaxHandshakeBytes, store_protocol::kMaxMessageBytes}) {
    std::string buffer = input;
    try {
      while (true) {
        const std::string before = buffer;
        auto message = store_protocol::decode(buffer, limit);
        if (!message) break;
        const std::string encoded = store_protocol::encode(*message);
        if (encoded.size() > limit) loom::fuzz::broken("decoded a message over the limit");
        if (before.compare(0, encoded.size(), encoded) != 0 ||
            before.size() != encoded.size() + buffer.size()) {
          loom::fuzz::broken("a decoded message does not re-encode to its bytes");
        }
        const auto version = table.version();
        auto reply = table.apply(*message);
        if (reply && reply->code != store_protocol::kOk && table.version() != version) {
          loom::fuzz::broken("a refused request changed the table");
        }
      }
    } catch (const loom::CommError&) {
      // malformed bytes: the server answers with this error and closes the connection
    }
  }
}
