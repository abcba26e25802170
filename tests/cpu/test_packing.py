"""The packed log-prob forward (lopti/cpu/packing.py) against TRL's padded one, and when the trainer uses it."""

import warnings

import pytest
import torch
from test_trainer import lopti_trainer
from transformers import AutoModelForCausalLM, AutoTokenizer
from trl.trainer.utils import add_fused_lm_head

import lopti.cpu.packing as packing_module
from lopti.core.packing import pack_shared_prompts
from lopti.cpu.packing import packed_log_probs, shared_prefill_generate
from lopti.train.config import LoptiGRPOConfig

OUTPUTS = ("log_probs", "entropy", "log_sum_sq_probs")


def fused_model(folder):
    model = AutoModelForCausalLM.from_pretrained(folder)
    add_fused_lm_head(model, outputs=OUTPUTS)
    return model


def grouped_batch(vocab: int, prompt_lengths: list[int], group: int, completion_length: int, seed: int = 0):
    """Return (ids, mask) in TRL's layout: each prompt `group` times, left-padded, then right-padded completions
    of every length from 1 (the end-of-sequence token alone) to `completion_length`, rows shuffled."""
    generator = torch.Generator().manual_seed(seed)
    width = max(prompt_lengths)
    rows = len(prompt_lengths) * group
    ids = torch.zeros(rows, width + completion_length, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for p, length in enumerate(prompt_lengths):
        prompt = torch.randint(3, vocab, (length,), generator=generator)
        for k in range(group):
            row, n = p * group + k, 1 + (p * group + k) % completion_length
            ids[row, width - length : width], mask[row, width - length : width] = prompt, 1
            ids[row, width : width + n] = torch.randint(3, vocab, (n,), generator=generator)
            mask[row, width : width + n] = 1
    order = torch.randperm(rows, generator=generator)
    return ids[order], mask[order]


def padded_log_probs(model, ids, mask, completion_length):
    """TRL's forward (GRPOTrainer._get_per_token_logps_and_entropies): every row in full, padding included."""
    labels = ids.masked_fill(mask == 0, -100)
    labels[:, :-completion_length] = -100
    out = model(input_ids=ids, attention_mask=mask, labels=labels, fused_lm_head=True)
    return tuple(getattr(out, name)[:, -completion_length:] for name in ("log_probs", "entropy", "log_sum_sq_probs"))


def test_packed_forward_gives_the_padded_log_probs_and_gradients(tiny_model_dir):
    model = fused_model(tiny_model_dir)
    ids, mask = grouped_batch(model.config.vocab_size, [9, 14, 5], group=4, completion_length=7)
    padded = padded_log_probs(model, ids, mask, 7)
    packed = packed_log_probs(model, ids, mask, 7, pad_token_id=0, chunk_rows=len(ids))
    for ours, theirs in zip(packed, padded, strict=True):
        torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-5)
    assert torch.all(packed[0][mask[:, -7:] == 0] == 0) and torch.all(packed[0][mask[:, -7:] == 1] < 0)

    def gradients(values):
        model.zero_grad()
        (values[0] * torch.linspace(-1, 1, values[0].numel()).view_as(values[0])).sum().backward()
        return [p.grad.clone() for p in model.parameters()]

    for ours, theirs in zip(gradients(packed), gradients(padded), strict=True):
        assert (ours - theirs).norm() <= 1e-5 * theirs.norm()


def forwards_with_autograd(model) -> list[tuple[int, bool]]:
    """Record (rows, autograd on) of each forward of `model`."""
    calls = []
    model.register_forward_pre_hook(lambda module, args, kwargs: calls.append(
        (len(kwargs["input_ids"]), torch.is_grad_enabled())), with_kwargs=True)  # fmt: skip
    return calls


def test_frozen_rows_run_without_autograd_and_change_no_number(tiny_model_dir):
    model = fused_model(tiny_model_dir)
    ids, mask = grouped_batch(model.config.vocab_size, [9, 14, 5], group=4, completion_length=7)
    whole = packed_log_probs(model, ids, mask, 7, pad_token_id=0, chunk_rows=len(ids))
    groups = pack_shared_prompts(ids, mask, 7, pad_token_id=0).row_groups
    frozen = groups != groups[0]  # every row of two prompts: the loss below gives them no gradient
    calls = forwards_with_autograd(model)
    split = packed_log_probs(model, ids, mask, 7, pad_token_id=0, chunk_rows=len(ids), frozen=frozen)
    assert calls == [(2, False), (1, True)]  # the two frozen prompts without autograd, then one with it
    for ours, theirs in zip(split, whole, strict=True):
        torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-6)

    def gradients(values):
        model.zero_grad()
        weights = torch.linspace(-1, 1, values[0].numel()).view_as(values[0]) * ~frozen[:, None]
        (values[0] * weights).sum().backward()
        return [p.grad.clone() for p in model.parameters()]

    for ours, theirs in zip(gradients(split), gradients(whole), strict=True):
        assert (ours - theirs).norm() <= 1e-5 * theirs.norm()


def test_with_every_row_frozen_one_prompt_keeps_autograd(tiny_model_dir):
    model = fused_model(tiny_model_dir)
    ids, mask = grouped_batch(model.config.vocab_size, [9, 14, 5], group=4, completion_length=7)
    calls = forwards_with_autograd(model)
    log_probs = packed_log_probs(
        model, ids, mask, 7, pad_token_id=0, chunk_rows=len(ids), frozen=torch.ones(len(ids), dtype=torch.bool)
    )[0]
    assert calls == [(2, False), (1, True)]
    (log_probs * 0).sum().backward()  # an all-zero loss still gives every weight its zero gradient, as Adam needs
    assert all(p.grad is not None and not p.grad.any() for p in model.parameters())


def test_each_chunk_keeps_one_prompt_with_autograd(tiny_model_dir):
    """Every chunk runs one forward with autograd, so each process of a DDP run makes as many wrapped forwards as the
    others, whatever its rewards."""
    model = fused_model(tiny_model_dir)
    ids, mask = grouped_batch(model.config.vocab_size, [9, 14, 5], group=4, completion_length=7)
    order = pack_shared_prompts(ids, mask, 7, pad_token_id=0).row_groups.argsort()
    ids, mask = ids[order], mask[order]  # grouped by prompt: chunks of 4 rows are whole groups
    frozen = torch.ones(len(ids), dtype=torch.bool)
    frozen[4:8] = False  # the second chunk's group learns; the first and third are all frozen
    calls = forwards_with_autograd(model)
    chunked = packed_log_probs(model, ids, mask, 7, pad_token_id=0, chunk_rows=4, frozen=frozen)
    assert [grad for _, grad in calls] == [True, True, True]
    whole = packed_log_probs(model, ids, mask, 7, pad_token_id=0, chunk_rows=len(ids))
    torch.testing.assert_close(chunked[0], whole[0], rtol=1e-5, atol=1e-6)


def test_the_lm_head_scores_no_column_before_the_first_completion_token(tiny_model_dir):
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    ids, mask = grouped_batch(model.config.vocab_size, [9, 14, 5], group=4, completion_length=7)
    columns = []
    model.lm_head.register_forward_hook(lambda module, args, output: columns.append(args[0].size(1)))
    packed_log_probs(model, ids, mask, 7, pad_token_id=0, chunk_rows=len(ids))
    width = pack_shared_prompts(ids, mask, 7, pad_token_id=0).input_ids.size(1)
    assert columns == [width - (5 - 1)]  # the shortest prompt's first completion token follows its first 4 tokens


def test_packing_runs_each_prompt_once_per_chunk(tiny_model_dir):
    ids, mask = grouped_batch(50, [9, 14, 5], group=4, completion_length=7)
    packed = pack_shared_prompts(ids, mask, 7, pad_token_id=0)
    completion_tokens = int(mask[:, -7:].sum())
    assert packed.input_ids.size(0) == 3  # one row per distinct prompt
    # each prompt once (its last token once per completion, as the head of the completion's segment)
    assert int((packed.shift_labels != -100).sum()) == completion_tokens == len(packed.targets)
    # every row starts at position 0 and counts up through its real tokens; padding sits at position 0
    assert int((packed.position_ids > 0).sum()) + 3 == (9 - 1) + (14 - 1) + (5 - 1) + completion_tokens
    model = fused_model(tiny_model_dir)
    padded = padded_log_probs(model, ids, mask, 7)[0]
    chunked = packed_log_probs(model, ids, mask, 7, pad_token_id=0, chunk_rows=4)  # chunks mix the groups
    torch.testing.assert_close(chunked[0], padded, rtol=1e-5, atol=1e-5)


def test_packing_declines_what_it_cannot_pack():
    ids, mask = grouped_batch(50, [9, 14, 5], group=1, completion_length=7)
    assert pack_shared_prompts(ids, mask, 7, pad_token_id=0) is None  # no prompt repeats: nothing to save
    ids, mask = grouped_batch(50, [9, 14], group=2, completion_length=7)
    right_padded = mask.clone()
    right_padded[:, :14] = mask[:, :14].flip(1)
    assert pack_shared_prompts(ids, right_padded, 7, pad_token_id=0) is None
    holed = mask.clone()
    holed[:, 14] = 0  # a completion whose first token is masked but later ones are not
    assert pack_shared_prompts(ids, holed, 7, pad_token_id=0) is None


def id_reward(completions, completion_ids, **kwargs):
    return [sum((k + 1) * i for k, i in enumerate(ids)) % 97 / 97 for ids in completion_ids]


def make(folder, prompts, tmp_path, cpu_fast_path, reward=id_reward, **overrides):
    settings = dict(lopti=True, num_iterations=2, ar_alpha=0.3, beta=0.04, max_steps=4) | overrides
    args = LoptiGRPOConfig(
        output_dir=str(tmp_path / str(cpu_fast_path)), per_device_train_batch_size=8, num_generations=4,
        max_completion_length=8, learning_rate=1e-3, use_cpu=True, bf16=False, report_to=[], logging_steps=1,
        seed=0, save_strategy="no", disable_tqdm=True, **settings,
    )  # fmt: skip
    return lopti_trainer(cpu_fast_path)(
        model=AutoModelForCausalLM.from_pretrained(folder),
        reward_funcs=[reward],
        args=args,
        train_dataset=prompts,
        processing_class=AutoTokenizer.from_pretrained(folder),
    )


def logged(trainer, key):
    return [entry[key] for entry in trainer.state.log_history if key in entry]


def test_packed_training_matches_padded_training(peaked_model_dir, kk_prompts, tmp_path, monkeypatch):
    calls = []

    def counting(*args, **kwargs):
        result = packed_log_probs(*args, **kwargs)
        calls.append(result is not None)
        return result

    monkeypatch.setattr(packing_module, "packed_log_probs", counting)
    prefills = []

    def counting_prefills(model, input_ids, attention_mask, **kwargs):
        prefills.append(len(input_ids))
        return shared_prefill_generate(model, input_ids, attention_mask, **kwargs)

    monkeypatch.setattr(packing_module, "shared_prefill_generate", counting_prefills)
    padded = make(peaked_model_dir, kk_prompts, tmp_path, cpu_fast_path=False)
    padded.train()
    assert calls == [] and prefills == []
    packed = make(peaked_model_dir, kk_prompts, tmp_path, cpu_fast_path=True)
    packed.train()
    # per generated batch: the reference's log-probs (β > 0) and one pass per Lopti phase; the old log-probs come
    # from phase 1's forward
    assert calls == [True] * 6
    assert prefills == [8, 8]  # one rollout per generated batch, through the shared prefill
    assert logged(packed, "loss") == pytest.approx(logged(padded, "loss"), abs=1e-6)
    assert logged(packed, "grad_norm") == pytest.approx(logged(padded, "grad_norm"), rel=1e-4)
    assert logged(packed, "probs/grad_share_[0.00,0.25)") == pytest.approx(
        logged(padded, "probs/grad_share_[0.00,0.25)"), abs=1e-5
    )
    # Adam divides each gradient by its own running scale, so rounding in a near-zero gradient moves a weight by
    # up to about the learning rate: the weights agree to a tenth of it
    for p, q in zip(padded.model.parameters(), packed.model.parameters(), strict=True):
        torch.testing.assert_close(q, p, atol=1e-4, rtol=0)


def tied_reward(prompts, completion_ids, **kwargs):
    """`id_reward`, except that every completion of a prompt of even length scores 0.5: that group's advantages are
    all zero, so the loss gives its rows no gradient."""
    scores = id_reward(None, completion_ids)
    return [0.5 if len(prompt) % 2 == 0 else score for prompt, score in zip(prompts, scores, strict=True)]


@pytest.mark.parametrize(
    "checkpointing",
    [{}, dict(gradient_checkpointing=True, gradient_checkpointing_kwargs={"use_reentrant": True})],
    ids=["plain", "reentrant-checkpointing"],
)
def test_tied_groups_skip_their_backward_and_train_as_padded(
    peaked_model_dir, kk_prompts, tmp_path, monkeypatch, checkpointing
):
    frozen_rows, warned = [], []

    def counting(*args, **kwargs):
        frozen = args[7] if len(args) > 7 else kwargs.get("frozen")
        frozen_rows.append(0 if frozen is None else int(frozen.sum()))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            result = packed_log_probs(*args, **kwargs)
        warned.extend(str(warning.message) for warning in caught)
        return result

    monkeypatch.setattr(packing_module, "packed_log_probs", counting)
    settings = dict(beta=0.0, reward=tied_reward, **checkpointing)
    padded = make(peaked_model_dir, kk_prompts, tmp_path, cpu_fast_path=False, **settings)
    padded.train()
    packed = make(peaked_model_dir, kk_prompts, tmp_path, cpu_fast_path=True, **settings)
    packed.train()
    # where transformers checkpoints a layer without autograd too (5.9), reentrant checkpointing warns that no input
    # requires a gradient: the frozen forward runs with checkpointing off
    assert not [message for message in warned if "requires_grad" in message]
    assert len(frozen_rows) == 4 and sum(frozen_rows) >= 4  # a tied group of 4 rows, in each pass over its batch
    assert logged(packed, "loss") == pytest.approx(logged(padded, "loss"), abs=1e-6)
    assert logged(packed, "grad_norm") == pytest.approx(logged(padded, "grad_norm"), rel=1e-4)
    assert logged(packed, "entropy") == pytest.approx(logged(padded, "entropy"), abs=1e-5)
    for p, q in zip(padded.model.parameters(), packed.model.parameters(), strict=True):
        torch.testing.assert_close(q, p, atol=1e-4, rtol=0)


@pytest.mark.parametrize(
    "settings",
    [
        dict(beta=0.04),
        dict(entropy_coef=0.01),
        dict(token_credit=["stapo"]),
        dict(ar_alpha=0.0, lopti=False, top_entropy_quantile=0.5),
    ],
    ids=["kl", "entropy-bonus", "credit-step", "trl-loss"],
)
def test_a_loss_term_beyond_the_advantages_freezes_no_row(tiny_model_dir, kk_prompts, tmp_path, settings):
    trainer = make(tiny_model_dir, kk_prompts, tmp_path, cpu_fast_path=True, **settings)
    assert trainer._rows_without_gradient({"advantages": torch.zeros(4)}) is None


def test_rows_whose_advantages_are_all_zero_are_frozen(tiny_model_dir, kk_prompts, tmp_path):
    trainer = make(tiny_model_dir, kk_prompts, tmp_path, cpu_fast_path=True, beta=0.0)
    per_response = torch.tensor([0.0, 0.5, 0.0, -0.5])
    assert trainer._rows_without_gradient({"advantages": per_response}).tolist() == [True, False, True, False]
    per_token = torch.tensor([[0.0, 0.0], [0.0, 0.3], [0.0, 0.0]])  # lopti's advantage estimators
    assert trainer._rows_without_gradient({"advantages": per_token}).tolist() == [True, False, True]


def test_packing_is_cpu_only(tiny_model_dir, kk_prompts, tmp_path):
    trainer = make(tiny_model_dir, kk_prompts, tmp_path, cpu_fast_path=True)
    ids, mask = grouped_batch(trainer.model.config.vocab_size, [9, 14], group=4, completion_length=7)
    assert trainer._packed_logps(trainer.model, ids, mask, 7) is not None
    # another device keeps TRL's forward (and its numerics): checked before anything runs
    assert trainer._packed_logps(trainer.model, ids.to("meta"), mask.to("meta"), 7) is None
    assert trainer._packed_logps(trainer.model, ids, mask, 7, pixel_values=torch.zeros(1)) is None


def test_shared_prefill_samples_what_generate_samples(tiny_model_dir):
    from transformers import GenerationConfig

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()
    ids, mask = grouped_batch(model.config.vocab_size, [9, 14, 5], group=4, completion_length=1)
    ids, mask = ids[:, :-1], mask[:, :-1]  # prompts only, left-padded
    config = GenerationConfig(max_new_tokens=12, do_sample=True, temperature=1.0, top_k=0, pad_token_id=0)
    forwards = []
    model.register_forward_pre_hook(lambda module, args, kwargs: forwards.append(len(kwargs["input_ids"])),
                                    with_kwargs=True)  # fmt: skip
    outputs = []
    for generate in (type(model).generate, shared_prefill_generate):
        torch.manual_seed(0)
        with torch.no_grad():
            outputs.append(generate(model, input_ids=ids, attention_mask=mask, generation_config=config))
    assert torch.equal(outputs[1], outputs[0])  # the same tokens from the same random numbers
    # plain: 12 steps of 12 rows; shared: one prefill of the 3 distinct prompts, then 12 steps (of the rows that have
    # not ended: tests/cpu/test_decode.py)
    assert forwards[:13] == [12] * 12 + [3] and len(forwards) == 25


@pytest.mark.parametrize(
    "settings, fast, skipped",
    [
        (dict(), True, True),  # Lopti's two passes, one optimizer step each: phase 1 sees the generating weights
        (dict(), False, False),  # TRL's own path
        # one pass over two micro-batches with a step between them: the second sees updated weights
        (dict(lopti=False, num_iterations=1, steps_per_generation=2, max_steps=2), True, False),
    ],
    ids=["lopti", "fast-path-off", "steps-within-a-batch"],
)
def test_old_forward_is_skipped_exactly_when_the_first_pass_gives_it(
    tiny_model_dir, kk_prompts, tmp_path, settings, fast, skipped
):
    trainer = make(tiny_model_dir, kk_prompts, tmp_path, cpu_fast_path=fast, beta=0.0, **settings)
    forwards = []
    logps = trainer._get_per_token_logps_and_entropies

    def recording(*args, **kwargs):
        result = logps(*args, **kwargs)
        forwards.append("loss" if torch.is_grad_enabled() else "old" if result[0] is not None else "skipped")
        return result

    trainer._get_per_token_logps_and_entropies = recording
    trainer.train()
    batches = (
        trainer.state.global_step
        * trainer.args.gradient_accumulation_steps
        // (trainer.args.steps_per_generation * trainer.num_iterations)
    )
    assert forwards.count("skipped") == (batches if skipped else 0)
    assert forwards.count("old") == (0 if skipped else batches)
