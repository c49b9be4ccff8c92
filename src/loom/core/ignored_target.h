// The target id a language model's loss skips: a position whose next token counts in no loss
// (a prompt token of a fine-tuning pair, data/token_shard.h's loss mask). Its position adds
// nothing to the loss and its logits get no gradient. -100, the value torch's and Hugging Face's
// losses ignore too, so targets a user makes for those mean the same here.
#pragma once

#include <cstdint>

namespace loom {

constexpr std::int64_t kIgnoredTarget = -100;

}  // namespace loom
