"""Which token comes next: the step pipeline every decode loop calls.

The ONNX engine (service/engine/engine.py), the PyTorch reference decoder (training/decode.py, which
`attnserve-export verify` compares with) and the /explain loop (service/engine/explain.py) all produce a
step's logits their own way, then hand them to `choose_tokens`. Nothing else in the tree picks a token,
seeds a generator or decides that a sequence has stopped.

`choose_tokens` = `pick_tokens` (the in-graph argmax, or processed logits: service/engine/processors.py)
-> `advance_rows` (append, stop: service/engine/stopping.py) -> `advance_searches` (service/engine/beam.py)
-> `report_finished`, over a batch's `RowState` (service/engine/rows.py). The request's settings and seeding
are service/engine/options.py's.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from attnserve.service.engine.beam import place_beams, update_searches
from attnserve.service.engine.processors import draw_uniforms, greedy_tokens, log_softmax, process_logits, sample_rows, top_tokens
from attnserve.service.engine.rows import GREEDY, SAMPLE, Generation, Row, RowState
from attnserve.service.engine.stopping import rank

FEW_ROWS = 4  # up to this many rows, per-row scalar reads cost less than one vectorised gather


@dataclass(slots=True)
class StepResult:
    """What a step produced for one generation. A streaming generation (one row) gets one per
    token; a generation of several rows gets one when it finishes (its hypotheses are then on it)."""

    generation: Generation
    token_id: int  # the eos id when finish_reason == "eos_token" (not added to token_ids)
    text: str  # the streamed text delta ("" for eos)
    logprob: float | None
    finish_reason: str | None
    special: bool  # True for the eos token
    top_tokens: list[tuple[int, float]] | None = None  # (id, raw logprob), most likely first


@dataclass
class StepChoice:
    tokens: np.ndarray  # [B] the token each row feeds next (beam rows: after their reorder)
    reorder: tuple[np.ndarray, np.ndarray] | None  # (dest, src): rows dest take the cache of rows src (beam search)
    leaving: list[Row]  # rows that finished this step
    results: list[StepResult]


@dataclass(slots=True)
class PickedTokens:
    """Every row's token of one step, and the distributions they were picked from."""

    tokens: np.ndarray  # [B] int64
    token_list: list[int]  # the same, as Python ints: the per-row work reads them (indexing numpy per row costs more)
    raw: np.ndarray | None  # [B, V] the model's own log-probabilities; None when no row reports or ranks by them
    processed_rows: np.ndarray  # the rows picked from processed logits (sampling, penalties), in row order
    processed: np.ndarray | None  # [len(processed_rows), V] their processed logits
    normalised: bool = False  # `raw` came masked by a checkpoint's rules (choose_tokens): masked, never renormalised


def choose_tokens(
    state: RowState,
    logits: np.ndarray,
    next_tokens: np.ndarray | None,
    eos_id: int,
    decode,
    normalised: bool = False,
    special: frozenset[int] = frozenset(),
) -> StepChoice:
    """One step's token choice for every row of a batch, and what follows from it.

    logits [B, V] (float32 or 64) from any decode loop; next_tokens [B]: an in-graph argmax, used
    for rows that need no processing (None: computed here). `decode`: ids -> text. Updates the
    rows, the searches and `state` (counts, and the gathers of beam rows); the caller applies
    `reorder` to its cache, feeds `tokens`, and frees `leaving` from its cache and from `state`. `normalised`: the
    logits are already log-probabilities that later rules masked (an imported checkpoint's, service/engine/rules.py),
    taken as they are, not renormalised, as transformers' beam search scores them. `special`: ids besides the end
    token that a streamed token reports as special (an imported checkpoint's special set: BART's forced `<s>`).
    """
    picked = pick_tokens(state, logits, next_tokens, eos_id, normalised)
    results, leaving, done, searches = advance_rows(state, picked, eos_id, decode, special)
    reorder = advance_searches(state, picked, searches, done, leaving, eos_id) if searches else None
    if done:
        report_finished(done, results, eos_id, decode)
    state.advance(picked.tokens)
    return StepChoice(picked.tokens, reorder, leaving, results)


def pick_tokens(
    state: RowState, logits: np.ndarray, next_tokens: np.ndarray | None, eos_id: int, normalised: bool = False
) -> PickedTokens:
    """Every row's token: the argmax (in-graph when given), kept from the end token before a greedy row's
    min_new_tokens, and for sampled or penalised rows the choice over their processed logits. Beam rows'
    tokens are replaced by their searches' (advance_searches)."""
    summary = state.summary
    # the in-graph argmax is the caller's to give (the engine's is a fresh array): corrected in place below
    tokens = np.asarray(next_tokens, dtype=np.int64) if next_tokens is not None else greedy_tokens(logits)
    raw = (logits if normalised else log_softmax(logits)) if summary.logprobs else None  # [B, V] the model's log-probs
    token_list = tokens.tolist()
    if summary.min_new_until and eos_id in token_list:
        token_list = _hold_back_eos(state, logits, tokens, token_list, eos_id)
    processed_rows = summary.processed_rows
    processed = None
    if processed_rows.size:
        processed = _pick_processed(state, logits, tokens, processed_rows, eos_id)
        token_list = tokens.tolist()
    return PickedTokens(tokens, token_list, raw, processed_rows, processed, normalised)


def _hold_back_eos(state: RowState, logits: np.ndarray, tokens: np.ndarray, token_list: list[int], eos_id: int) -> list[int]:
    """A greedy row whose only processor is min_new_tokens keeps the in-graph argmax unless that is the end
    token before its minimum: then its argmax without the end token (the benchmark forces every length this
    way, with no per-step processing). Writes `tokens`; returns them as Python ints."""
    steps = state.steps
    too_early = [i for i, until in state.summary.min_new_until if steps < until and token_list[i] == eos_id]
    if not too_early:
        return token_list
    if len(too_early) == 1 and logits.flags.writeable:  # one row (batch 1, or the one row still short): in its own row
        i = too_early[0]
        row = logits[i]
        kept = row[eos_id]
        row[eos_id] = -np.inf  # the step's own logits, put back at once: nothing reads them in between
        token_list[i] = int(row.argmax())
        row[eos_id] = kept
        tokens[i] = token_list[i]
        return token_list
    x = logits[too_early]  # a copy (fancy indexing); float32 widened to float64 would not change the argmax
    x[:, eos_id] = -np.inf
    tokens[too_early] = greedy_tokens(x)
    return tokens.tolist()


def _pick_processed(state: RowState, logits: np.ndarray, tokens: np.ndarray, rows: np.ndarray, eos_id: int) -> np.ndarray:
    """Process the logits of `rows` and pick their tokens into `tokens`: the argmax for greedy rows, one
    uniform per sampled row. Returns the processed logits [len(rows), V] (beam searches with penalties read them)."""
    params = state.params.take(rows)
    counts = state.counts[rows] if state.penalised else None
    processed = process_logits(logits[rows], params, counts, state.n_generated[rows], eos_id)
    greedy = params.mode == GREEDY
    if greedy.any():
        tokens[rows[greedy]] = greedy_tokens(processed[greedy])
    sampled = params.mode == SAMPLE
    if sampled.any():
        sampled_rows = rows[sampled]
        tokens[sampled_rows] = sample_rows(processed[sampled], draw_uniforms([state.rows[i].rng for i in sampled_rows]))
    return processed


def advance_rows(
    state: RowState, picked: PickedTokens, eos_id: int, decode, special: frozenset[int] = frozenset()
) -> tuple[list[StepResult], list[Row], list[Generation], list[Generation]]:
    """Append each picked token to its row (rows of a beam search are left to their search) and stop the rows
    that end: the end token, the length limit or a stop sequence. Returns (results, leaving, done, searches):
    a StepResult per token of a streaming generation, the rows that stopped, the generations of several rows
    whose last row stopped (their hypotheses are ranked by report_finished), and the beam searches."""
    results: list[StepResult] = []
    leaving: list[Row] = []
    done: list[Generation] = []
    searches: list[Generation] = []
    rows, raw, token_list = state.rows, picked.raw, picked.token_list
    wants_logprob = state.params.logprobs.tolist() if raw is not None else None
    # every row's picked token's log-probability: one gather over many rows, `item` per row over a few (the same
    # floats either way; right after the decoder's call each numpy call runs from cold caches)
    if raw is None:
        picked_lp = None
    elif len(token_list) <= FEW_ROWS:
        picked_lp = [raw.item(i, tok) for i, tok in enumerate(token_list)]
    else:
        picked_lp = raw[np.arange(len(token_list)), picked.tokens].tolist()
    for i in state.summary.active_rows:
        row = rows[i]
        gen = row.generation
        if gen.search is not None:
            if row.index == 0:
                searches.append(gen)
            continue
        options = gen.options
        streams = options.streams
        tok = token_list[i]
        lp = picked_lp[i] if wants_logprob and wants_logprob[i] else None  # only where asked for: the same alone or batched
        top = top_tokens(raw[i], options.top_n_tokens) if options.top_n_tokens else None
        if tok == eos_id:
            row.finish_reason, row.eos_logprob = "eos_token", lp
            leaving.append(row)
            if streams:
                rest = ""
                if row.held:  # the text a byte-level token left inside a character goes out with the end
                    full = decode(row.token_ids)
                    rest, row.text, row.held = full[len(row.text) :], full, False
                finish(gen, decode)
                results.append(StepResult(gen, tok, rest, lp, "eos_token", True, top))
            elif all(r.finish_reason is not None for r in gen.rows):
                done.append(gen)
            continue
        token_ids = row.token_ids
        token_ids.append(tok)
        if lp is not None:
            row.logprobs.append(lp)
        old = row.text
        if (streams and options.token_text) or options.stop:
            row.text = decode(token_ids)
        stop, reason = gen.stopping(len(token_ids), old, row.text)
        if streams and not stop and row.text.endswith("\ufffd") and row.text != old:
            # a byte-level token that ends inside a character: its text waits for the one that completes it, so the
            # streamed texts concatenate to the answer's (the next decode turns that U+FFFD into the character)
            row.text, row.held = old, True
        else:
            row.held = False
        if stop:
            row.finish_reason = reason
            leaving.append(row)
        if streams:
            if stop:
                finish(gen, decode)
            results.append(StepResult(gen, tok, row.text[len(old) :], lp, reason, tok in special, top))
        elif stop and all(r.finish_reason is not None for r in gen.rows):
            done.append(gen)
    return results, leaving, done, searches


def advance_searches(
    state: RowState,
    picked: PickedTokens,
    searches: list[Generation],
    done: list[Generation],
    leaving: list[Row],
    eos_id: int,
) -> tuple[np.ndarray, np.ndarray] | None:
    """Every beam search takes its step: the searches of one width choose their candidates together
    (update_searches), each new beam takes a row of its search (place_beams: its parent's where it can; a
    search's `Generation.rows` follow, in beam order), the rows' tokens become their beams', and a search that
    ended joins `done` with its rows in `leaving`. Returns (dest, src), the rows that take another row's cache
    (None: none does), after gathering `state`'s per-row arrays the same way."""
    tokens = picked.tokens
    moved: list[tuple[np.ndarray, np.ndarray]] = []  # (rows, parent rows) that take a cache, by width
    for group in _searches_by_width(state, picked, searches, eos_id).values():
        gens = [g for g, *_ in group]
        all_slots = np.array([sl for _, sl, _, _ in group], dtype=np.int64)  # [n, W]
        shared = group[0][2]
        if all(dist is shared for _, _, dist, _ in group):  # one distribution: gathered for all at once
            search_lp = shared[np.array([r for *_, r in group], dtype=np.int64)]
        else:
            search_lp = np.stack([dist[r] for *_, dist, r in group])
        parents, beam_tokens = update_searches([g.search for g in gens], search_lp, picked.raw[all_slots])
        going_on = [not g.search.done for g in gens]
        if not all(going_on):
            for g, goes_on in zip(gens, going_on):
                if not goes_on:
                    done.append(g)
                    leaving.extend(g.rows)
            gens = [g for g, goes_on in zip(gens, going_on) if goes_on]
            if not gens:
                continue
            all_slots, parents, beam_tokens = all_slots[going_on], parents[going_on], beam_tokens[going_on]
        new_slots, dest, src = place_beams(all_slots, parents)
        tokens[new_slots] = beam_tokens  # the rows of each search that goes on follow its beams
        rows = state.rows
        for g, order in zip(gens, new_slots.tolist()):  # beam j lives in row new_slots[j] from now on
            g.rows = [rows[i] for i in order]
        if dest.size:
            moved.append((dest, src))
    if not moved:
        return None
    # Every search's rows in one gather: searches own disjoint rows, so this equals one gather per search,
    # and the cache's arrays are gathered once per step, not once per search (32 searches: 192 copies).
    # A beam that stays in its parent's row keeps its cache where it is (place_beams).
    dest, src = (np.concatenate(a) for a in zip(*moved)) if len(moved) > 1 else moved[0]
    state.gather(dest, src)
    return dest, src


def _searches_by_width(
    state: RowState, picked: PickedTokens, searches: list[Generation], eos_id: int
) -> dict[int, list[tuple[Generation, list[int], np.ndarray, list[int] | np.ndarray]]]:
    """Each search's slots and which rows of which batch-wide log-probabilities it searches, grouped by width: the
    model's own; before min_new_tokens, renormalised without the end token (an imported checkpoint's only masked,
    as transformers masks it); with penalties, the processed ones. Each distribution is computed once for the
    batch, row-wise (so each row as alone), not once per search. A search's rows joined together and share their
    settings: its first row speaks for them all."""
    raw, processed_rows = picked.raw, picked.processed_rows
    is_processed = None  # per row: picked from processed logits (None: no row is)
    if processed_rows.size:
        processed_index = np.full(len(state.rows), -1, dtype=np.int64)  # a row's index among processed_rows, or -1
        processed_index[processed_rows] = np.arange(processed_rows.size)
        is_processed = (processed_index >= 0).tolist()
    steps, ends_from = state.steps, state.summary.ends_from
    processed_lp = None  # log-probabilities of the processed rows, for searches with penalties
    raw_without_eos = None  # the model's log-probabilities renormalised without the end token
    by_width: dict[int, list[tuple[Generation, list[int], np.ndarray, list[int] | np.ndarray]]] = {}
    for gen in searches:
        slots = [r.slot for r in gen.rows]
        first = slots[0]
        if is_processed is not None and is_processed[first]:
            if processed_lp is None:
                processed_lp = log_softmax(picked.processed)
            dist, dist_rows = processed_lp, processed_index[slots]
        elif steps < ends_from[first]:
            if raw_without_eos is None:
                raw_without_eos = raw.copy()
                raw_without_eos[:, eos_id] = -np.inf
                if not picked.normalised:  # an imported checkpoint's: transformers' MinNewTokensLength only masks
                    raw_without_eos = log_softmax(raw_without_eos)
            dist, dist_rows = raw_without_eos, slots
        else:
            dist, dist_rows = raw, slots
        by_width.setdefault(len(slots), []).append((gen, slots, dist, dist_rows))
    return by_width


def report_finished(done: list[Generation], results: list[StepResult], eos_id: int, decode) -> None:
    """Rank the hypotheses of each generation of several rows that finished this step, and report it in
    `results` with its best hypothesis' last token."""
    for gen in done:
        finish(gen, decode)
        best = gen.hypotheses[0]
        if best.finish_reason == "eos_token":
            last, lp = eos_id, best.eos_logprob
        else:
            last = best.token_ids[-1] if best.token_ids else eos_id
            lp = best.logprobs[-1] if best.logprobs else None
        results.append(StepResult(gen, last, "", lp, gen.finish_reason, last == eos_id))


def finish(gen: Generation, decode) -> None:
    """A generation is complete: its ranked hypotheses (texts decoded once here) and its finish reason."""
    if gen.search is not None:
        hyps = gen.search.finalize()
    else:
        hyps = rank([r.hypothesis() for r in gen.rows])[: gen.options.n_best]
    for h in hyps:
        if not h.text and h.token_ids:
            h.text = decode(h.token_ids)
    gen.hypotheses = hyps
    gen.finish_reason = hyps[0].finish_reason
