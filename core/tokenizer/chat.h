// ChatML, the conversation format Qwen models are trained on:
//
//   <|im_start|>system
//   You are a helpful assistant.<|im_end|>
//   <|im_start|>user
//   Hello!<|im_end|>
//   <|im_start|>assistant
//
// The model answers after "<|im_start|>assistant\n" and ends with <|im_end|>.
// Qwen3's full template also handles <think> blocks and tools; kvscope does not
// need them, so this is the plain form (with thinking left to the model).
#pragma once

#include <string>
#include <vector>

namespace kvscope {

struct ChatMessage {
  std::string role;     // "system", "user" or "assistant"
  std::string content;
};

// "<|im_start|>ROLE\nCONTENT<|im_end|>\n" per message, then
// "<|im_start|>assistant\n" when add_generation_prompt. Tokenizer::encode turns
// the markers into their special-token ids.
std::string chat_prompt(const std::vector<ChatMessage>& messages, bool add_generation_prompt = true);

}  // namespace kvscope
