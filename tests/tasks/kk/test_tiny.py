"""The locally trained tiny tokenizer: lossless, tags kept, short K&K prompts."""

from transformers import AutoTokenizer

from lopti.tasks.kk.data import kk_records


def test_decoding_is_lossless_and_keeps_the_tags(tiny_model_dir):
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    text = "<think>Aaron lies.</think>\n<answer>\n(1) Aaron is a knave\n(2) Zoe is a knight\n</answer>"
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    assert tokenizer.decode(ids, skip_special_tokens=True) == text
    assert tokenizer.convert_tokens_to_ids("<think>") in ids


def test_compact_prompt_for_four_people_fits_200_tokens(tiny_model_dir):
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    rows = kk_records("4", train=0, test=30, seed=0, template="compact")["test"]
    lengths = [len(tokenizer(r["prompt"][0]["content"])["input_ids"]) for r in rows]
    assert max(lengths) <= 200, max(lengths)
