"""Models built in code with random weights, no download: tiny-random (a few-layer Llama with a character
tokenizer, for tests and smoke runs) and random:SHAPE (a shipped architecture, for trying a model's memory
and speed without its checkpoint)."""
from __future__ import annotations

import json
from pathlib import Path

import torch

from rlvr.errors import RlvrError
from rlvr.models.dtypes import weight_dtype

TINY = "tiny-random"
RANDOM = "random:"  # random:SHAPE: a shipped shape (rlvr/shapes/SHAPE.json) with random weights

CHATML_TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + "
    "'<|im_end|>' + '\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


# the shipped architectures (public configs) random_shape builds and rlvr plan reads (rlvr.plan imports it)
SHAPES = Path(__file__).resolve().parent.parent / "shapes"


def random_shape(shape: str, dtype: str, device: torch.device, quantize: str = "none", seed: int = 0):
    """(model, tokenizer): a shipped shape's architecture (rlvr/shapes/, public configs: no download) with
    random weights and the tiny character tokenizer, for trying a model's memory and speed without its
    checkpoint. Built on the meta device and materialised one module at a time on `device` (each linear
    layer quantised as it is made under quantize nf4), so a 32B shape in 4 bits never exists whole in bf16."""
    from transformers import AutoConfig, AutoModelForCausalLM

    from rlvr.nf4 import quantizable, to_nf4

    path = SHAPES / f"{shape}.json"
    if not path.is_file():
        raise RlvrError(f"model.name={RANDOM}{shape}: no such shape; shipped: "
                        f"{', '.join(sorted(p.stem for p in SHAPES.glob('*.json')))}")
    tok = tiny_tokenizer()
    values = json.loads(path.read_text())
    config = AutoConfig.for_model(values.pop("model_type"), **values)
    config.pad_token_id, config.eos_token_id, config.bos_token_id = tok.pad_token_id, tok.eos_token_id, tok.bos_token_id
    torch_dtype = weight_dtype(dtype, values.get("torch_dtype"), device)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, dtype=torch_dtype)
    head = model.get_output_embeddings()
    generator = torch.Generator(device=device).manual_seed(seed)
    with torch.no_grad():
        for module in model.modules():
            own = dict(module.named_parameters(recurse=False))
            if not own:
                continue
            module.to_empty(device=device, recurse=False)
            for pname, p in own.items():
                fresh = getattr(module, pname)
                if pname == "weight" and fresh.dim() == 2:
                    fresh.normal_(0.0, config.initializer_range, generator=generator)
                elif pname == "weight":
                    fresh.fill_(1.0)  # norms
                else:
                    fresh.zero_()
            if quantize == "nf4" and module is not head and quantizable(module):
                module.weight = torch.nn.Parameter(to_nf4(module.weight), requires_grad=False)
        for owner in [m for m in model.modules() if any(b.is_meta for b in m.buffers(recurse=False))]:
            with torch.device(device):  # rotary tables: made again, on the device, by their own constructor
                made = type(owner)(config=owner.config)
            for bname, buf in made.named_buffers(recurse=False):
                owner.register_buffer(bname, buf, persistent=bname in owner.state_dict())
    if getattr(config, "tie_word_embeddings", False):
        model.tie_weights()
    return model, tok


def tiny_tokenizer():
    """A character-level tokenizer with ChatML special tokens, built in code (no download)."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    specials = ["<pad>", "<unk>", "<|im_start|>", "<|im_end|>"]
    chars = ["\n"] + [chr(c) for c in range(32, 127)]
    vocab = {t: i for i, t in enumerate(specials + chars)}
    core = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    core.decoder = decoders.Fuse()
    tok = PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<pad>", unk_token="<unk>",
                                  eos_token="<|im_end|>", bos_token="<|im_start|>")
    tok.add_special_tokens({"additional_special_tokens": ["<|im_start|>", "<|im_end|>"]})
    tok.chat_template = CHATML_TEMPLATE
    return tok


def tiny_random(seed: int = 0, layers: int = 2, hidden: int = 64):
    """A few-layer randomly initialised Llama with the tiny tokenizer: for tests and smoke runs."""
    from transformers import AutoModelForCausalLM

    tok = tiny_tokenizer()
    config = tiny_config(layers, hidden, tok)
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    return model, tok


def tiny_config(layers: int = 2, hidden: int = 64, tok=None):
    """tiny-random's LlamaConfig (no weights: rlvr plan reads its shape)."""
    from transformers import LlamaConfig

    tok = tok or tiny_tokenizer()
    return LlamaConfig(
        vocab_size=len(tok), hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
        tie_word_embeddings=True, pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id,
        bos_token_id=tok.bos_token_id)
