#!/usr/bin/env python3
"""Write a tiny random-weight Llama with a locally trained BPE tokenizer, for CPU tests.

Nothing is downloaded: the tokenizer is trained with the `tokenizers` library on text generated
here from fixed seeds, and the weights are random (torch.manual_seed). The output is deterministic
for a given transformers/tokenizers/torch version.

    python make_tiny_model.py --out DIR [--hf-home HF_HOME --repo-id local/tiny-llama]

--out gets a directory vLLM can serve (`--model DIR`). With --hf-home, the tokenizer files (and
config.json) are also written in a Hugging Face cache layout,
    HF_HOME/hub/models--local--tiny-llama/snapshots/<rev>/  and  .../refs/main = <rev>,
so tools that insist on a repo id (aiperf with HF_HUB_OFFLINE=1) can use `--tokenizer local/tiny-llama`.

The chat template is ChatML with Hermes-style tool calls (`<tool_call>{...}</tool_call>`), and
`<tool_call>`/`</tool_call>` are single tokens, so vLLM's `--enable-auto-tool-choice
--tool-call-parser hermes` accepts requests with `tools` and `tool_choice: "auto"`.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import shutil
from pathlib import Path

SEED = 1234
VOCAB_SIZE = 4096
HIDDEN = 64
LAYERS = 2
HEADS = 2
KV_HEADS = 2
HEAD_DIM = 32
INTERMEDIATE = 128
MAX_POS = 32768

BOS, EOS, PAD = "<s>", "</s>", "<pad>"
SPECIAL = [BOS, EOS, PAD, "<|im_start|>", "<|im_end|>"]
# plain (non-special) added tokens: they must survive decoding so the hermes parser sees them
ADDED = ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<tools>", "</tools>"]

CHAT_TEMPLATE = r"""{%- if messages and messages[0]['role'] == 'system' -%}
{%- set sys_text = messages[0]['content'] -%}
{%- set rest = messages[1:] -%}
{%- else -%}
{%- set sys_text = '' -%}
{%- set rest = messages -%}
{%- endif -%}
{%- if sys_text or tools -%}
<|im_start|>system
{{ sys_text }}
{%- if tools %}

You can call functions. Their signatures are in <tools></tools>:
<tools>
{%- for tool in tools %}
{{ tool | tojson }}
{%- endfor %}
</tools>
For each call, answer with <tool_call>{"name": <function-name>, "arguments": <args-json-object>}</tool_call>
{%- endif %}<|im_end|>
{% endif -%}
{%- for m in rest -%}
{%- if m['role'] == 'assistant' -%}
<|im_start|>assistant
{% if m['content'] %}{{ m['content'] }}{% endif %}
{%- if m['tool_calls'] is defined and m['tool_calls'] %}
{%- for tc in m['tool_calls'] %}
{%- set f = tc['function'] if tc['function'] is defined else tc %}
<tool_call>{"name": "{{ f['name'] }}", "arguments": {{ f['arguments'] if f['arguments'] is string else (f['arguments'] | tojson) }}}</tool_call>
{%- endfor %}
{%- endif %}<|im_end|>
{% elif m['role'] == 'tool' -%}
<|im_start|>user
<tool_response>
{{ m['content'] }}
</tool_response><|im_end|>
{% else -%}
<|im_start|>{{ m['role'] }}
{{ m['content'] }}<|im_end|>
{% endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
<|im_start|>assistant
{% endif -%}
"""

WORDS = [
    "the",
    "of",
    "and",
    "to",
    "in",
    "is",
    "that",
    "for",
    "it",
    "as",
    "with",
    "was",
    "on",
    "be",
    "by",
    "at",
    "this",
    "from",
    "or",
    "an",
    "are",
    "not",
    "have",
    "model",
    "cache",
    "token",
    "request",
    "server",
    "prefix",
    "block",
    "chunk",
    "engine",
    "memory",
    "session",
    "turn",
    "tool",
    "call",
    "agent",
    "trace",
    "replay",
    "latency",
    "throughput",
    "benchmark",
    "node",
    "gpu",
    "cpu",
    "slurm",
    "job",
    "queue",
    "batch",
    "result",
    "function",
    "argument",
    "value",
    "name",
    "file",
    "read",
    "write",
    "search",
    "list",
    "open",
    "close",
    "error",
    "retry",
    "time",
    "first",
    "second",
    "last",
    "next",
    "user",
    "assistant",
    "system",
    "message",
    "content",
    "code",
    "python",
    "shell",
    "command",
    "data",
    "value",
    "key",
    "index",
    "table",
    "row",
    "column",
    "count",
    "sum",
    "mean",
    "max",
    "min",
    "sort",
    "filter",
    "map",
    "reduce",
    "hello",
    "world",
    "please",
    "thanks",
    "answer",
    "question",
    "explain",
    "summarize",
    "check",
    "fix",
    "test",
    "build",
    "run",
]


def corpus(rng: random.Random, lines: int = 6000):
    """Pseudo-English, code-ish and JSON-ish lines: enough for a byte-level BPE to learn merges."""
    for i in range(lines):
        kind = i % 4
        n = rng.randint(8, 30)
        words = [rng.choice(WORDS) for _ in range(n)]
        if kind == 0:
            yield " ".join(words).capitalize() + rng.choice([".", "?", "!", "."])
        elif kind == 1:
            fn = "_".join(words[:2])
            yield f"def {fn}({words[2]}, {words[3]}={rng.randint(0, 999)}):\n    return {words[4]}.{words[5]}()"
        elif kind == 2:
            args = {
                words[j]: (rng.randint(0, 10**6) if rng.random() < 0.5 else words[j + 1])
                for j in range(0, min(n - 1, 8), 2)
            }
            yield json.dumps({"name": "_".join(words[:2]), "arguments": args})
        else:
            yield f"{rng.randint(0, 10**9)} {' '.join(words)} {rng.random():.6f} /path/{words[0]}/{words[1]}.txt"


def build_tokenizer(seed: int):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        min_frequency=2,
        special_tokens=SPECIAL,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(list(corpus(random.Random(seed))), trainer=trainer)

    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=BOS,
        eos_token=EOS,
        pad_token=PAD,
        additional_special_tokens=["<|im_start|>", "<|im_end|>"],
        model_max_length=MAX_POS,
        clean_up_tokenization_spaces=False,
    )
    fast.add_tokens(ADDED)  # non-special
    fast.chat_template = CHAT_TEMPLATE
    return fast


def build_model(tokenizer, seed: int):
    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=HIDDEN,
        intermediate_size=INTERMEDIATE,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        num_key_value_heads=KV_HEADS,
        head_dim=HEAD_DIM,
        max_position_embeddings=MAX_POS,
        rope_theta=10000.0,
        rms_norm_eps=1e-5,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.convert_tokens_to_ids(BOS),
        eos_token_id=tokenizer.convert_tokens_to_ids(EOS),
        pad_token_id=tokenizer.convert_tokens_to_ids(PAD),
        torch_dtype="float32",
    )
    model = LlamaForCausalLM(cfg).to(torch.float32).eval()
    model.generation_config = GenerationConfig(
        bos_token_id=cfg.bos_token_id,
        # generation stops at </s> or <|im_end|> (the end of an assistant turn)
        eos_token_id=[cfg.eos_token_id, tokenizer.convert_tokens_to_ids("<|im_end|>")],
        pad_token_id=cfg.pad_token_id,
        do_sample=False,
    )
    return model


def write_hf_cache(model_dir: Path, hf_home: Path, repo_id: str) -> Path:
    """Copy the tokenizer files and config into HF_HOME/hub/models--ORG--NAME/snapshots/<rev>/."""
    files = sorted(
        p
        for p in model_dir.iterdir()
        if p.is_file() and not p.name.startswith(".") and not p.name.endswith(".safetensors")
    )
    h = hashlib.sha1()
    for p in files:
        h.update(p.name.encode() + b"\0" + p.read_bytes())
    rev = h.hexdigest()  # 40 hex chars, like a commit hash
    repo_dir = hf_home / "hub" / ("models--" + repo_id.replace("/", "--"))
    snap = repo_dir / "snapshots" / rev
    snap.mkdir(parents=True, exist_ok=True)
    for p in files:
        shutil.copyfile(p, snap / p.name)
    (repo_dir / "refs").mkdir(parents=True, exist_ok=True)
    (repo_dir / "refs" / "main").write_text(rev)  # no trailing newline, as huggingface_hub writes it
    return snap


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, type=Path, help="model directory to write")
    ap.add_argument("--hf-home", type=Path, help="also write the tokenizer into this HF_HOME's hub cache")
    ap.add_argument("--repo-id", default="local/tiny-llama", help="repo id for the HF cache copy")
    ap.add_argument("--seed", type=int, default=SEED)
    args = ap.parse_args()

    random.seed(args.seed)
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)

    tokenizer = build_tokenizer(args.seed)
    model = build_model(tokenizer, args.seed)
    tokenizer.save_pretrained(out)
    model.save_pretrained(out, safe_serialization=True)

    # round-trip checks: the files load, the template renders tools, tool tags are single tokens
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(out)
    for t in ("<tool_call>", "</tool_call>"):
        ids = tok.encode(t, add_special_tokens=False)
        assert len(ids) == 1, (t, ids)
    tools = [
        {
            "type": "function",
            "function": {"name": "get_time", "description": "now", "parameters": {"type": "object", "properties": {}}},
        }
    ]
    msgs = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "what time is it?"}]
    text = tok.apply_chat_template(msgs, tools=tools, tokenize=False, add_generation_prompt=True)
    assert "<tools>" in text and text.endswith("<|im_start|>assistant\n"), text

    n_params = sum(p.numel() for p in model.parameters())
    print(
        f"  tiny model: {out} ({n_params} params, vocab {len(tok)}, hidden {HIDDEN}, "
        f"{LAYERS} layers, max_position_embeddings {MAX_POS})"
    )
    if args.hf_home:
        snap = write_hf_cache(out, args.hf_home, args.repo_id)
        print(f"  HF cache copy: {snap} (tokenizer {args.repo_id})")


if __name__ == "__main__":
    main()
