#include "tokenizer/chat.h"

namespace kvscope {

std::string chat_prompt(const std::vector<ChatMessage>& messages, bool add_generation_prompt) {
  std::string prompt;
  for (const ChatMessage& m : messages) prompt += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
  // The assistant's turn is opened; the model writes the rest.
  if (add_generation_prompt) prompt += "<|im_start|>assistant\n";
  return prompt;
}

}  // namespace kvscope
