"""The names of the graphs' inputs and outputs (Contract 2 in docs/ARCHITECTURE.md), written once.

Export names the graphs it traces with these; the engine, the batch and the explain loop feed and
read the graphs by them. A leaf: it imports nothing, so every stage may import it.

    encoder  inputs:  input_ids [B, S], attention_mask [B, S]
             outputs: encoder_attention_bias [B, 1, 1, S], present.{i}.encoder.key/value [B, H, S, Dh]
    decoder  inputs:  input_ids [B, T], position_ids [B, T], decoder_attention_mask [B, P+T],
                      encoder_attention_bias, past_key_values.{i}.decoder.key/value [B, H, P, Dh],
                      past_key_values.{i}.encoder.key/value [B, H, S, Dh]
             outputs: logits [B, V], present.{i}.decoder.key/value [B, H, P+T, Dh], next_token [B]
                      (the in-graph argmax); the explain graph adds cross_attentions.{i} [B, H, T, S]
"""

from __future__ import annotations

INPUT_IDS = "input_ids"
ATTENTION_MASK = "attention_mask"
POSITION_IDS = "position_ids"
DECODER_ATTENTION_MASK = "decoder_attention_mask"
ENCODER_ATTENTION_BIAS = "encoder_attention_bias"
LOGITS = "logits"
NEXT_TOKEN = "next_token"
NEG_INF = -1e9  # the encoder_attention_bias value the graphs use for masked keys (never -inf)

PAST = "past_key_values."  # a cache the decoder reads
PRESENT = "present."  # a cache a graph writes: the encoder's cross K/V, the decoder's self K/V after its step
DECODER = "decoder"  # self-attention cache
ENCODER = "encoder"  # cross-attention K/V


def past_names(n_layers: int, kind: str) -> list[str]:
    """The decoder's cache inputs, key then value per layer; `kind` is DECODER (self) or ENCODER (cross)."""
    return [f"{PAST}{i}.{kind}.{kv}" for i in range(n_layers) for kv in ("key", "value")]


def present_names(n_layers: int, kind: str) -> list[str]:
    """The caches a graph writes, in `past_names` order: the encoder's ENCODER, the decoder's DECODER."""
    return [f"{PRESENT}{i}.{kind}.{kv}" for i in range(n_layers) for kv in ("key", "value")]


def past_name(present_name: str) -> str:
    """The decoder input a written cache is fed back as: present.0.encoder.key -> past_key_values.0.encoder.key."""
    return PAST + present_name.removeprefix(PRESENT)


PAST_LENGTHS = "past_lengths"  # v2 decoder: each row's past length, int32 [B] (GroupQueryAttention's seqlens_k)
TOTAL_SEQUENCE_LENGTH = "total_sequence_length"  # v2 decoder: the cache buffers' length Pmax, int32 [1]


def decoder_v2_io(n_layers: int, next_token: bool = True) -> tuple[list[str], list[str]]:
    """(inputs, outputs) of the v2 decoder (fused, in-place cache), in the graph's order: the self-attention
    caches are [B, H, Pmax, Dh] buffers bound as both past input and present output."""
    inputs = [
        INPUT_IDS,
        POSITION_IDS,
        PAST_LENGTHS,
        TOTAL_SEQUENCE_LENGTH,
        ENCODER_ATTENTION_BIAS,
        *past_names(n_layers, DECODER),
        *past_names(n_layers, ENCODER),
    ]
    outputs = [LOGITS, *present_names(n_layers, DECODER)]
    if next_token:
        outputs.append(NEXT_TOKEN)
    return inputs, outputs


def cross_attention_names(n_layers: int) -> list[str]:
    """The explain graph's extra outputs, one per decoder layer."""
    return [f"cross_attentions.{i}" for i in range(n_layers)]


def encoder_io(n_layers: int) -> tuple[list[str], list[str]]:
    """(inputs, outputs) of the encoder, in the graph's order."""
    return [INPUT_IDS, ATTENTION_MASK], [ENCODER_ATTENTION_BIAS, *present_names(n_layers, ENCODER)]


def decoder_io(n_layers: int, next_token: bool = True, explain: bool = False) -> tuple[list[str], list[str]]:
    """(inputs, outputs) of the one-step decoder, in the graph's order."""
    inputs = [
        INPUT_IDS,
        POSITION_IDS,
        DECODER_ATTENTION_MASK,
        ENCODER_ATTENTION_BIAS,
        *past_names(n_layers, DECODER),
        *past_names(n_layers, ENCODER),
    ]
    outputs = [LOGITS, *present_names(n_layers, DECODER)]
    if next_token:
        outputs.append(NEXT_TOKEN)
    if explain:
        outputs += cross_attention_names(n_layers)
    return inputs, outputs
