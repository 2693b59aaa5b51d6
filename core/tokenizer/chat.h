// ChatML, the conversation format Qwen models are trained on:
//
//   <|im_start|>system
//   (a system message, when one is given: Qwen3 adds none of its own)<|im_end|>
//   <|im_start|>user
//   Hello!<|im_end|>
//   <|im_start|>assistant
//
// The model answers after "<|im_start|>assistant\n" and ends with <|im_end|>.
// For a system and a user message (all generate --chat sends) this is what Qwen3's
// template writes, thinking left to the model (ChatPrompt.WritesWhatQwen3sTemplateWrites
// compares it with that template rendered by Jinja). Its full template does more that this
// does not: it drops the <think> block of earlier assistant turns, opens a closing
// assistant turn with an empty one, and wraps tool results in a user turn.
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
