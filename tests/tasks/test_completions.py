from lopti.tasks.completions import final_text


def test_final_text_is_after_the_last_think_end_and_before_a_reopened_think():
    assert final_text("no reasoning at all") == "no reasoning at all"
    assert final_text("<think>unclosed reasoning") == "<think>unclosed reasoning"
    assert final_text("<think>a</think>b</think>c") == "c"
    assert final_text("<think>a</think>answer<think>more reasoning") == "answer"
    assert final_text("</think><think>") == ""
