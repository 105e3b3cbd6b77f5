"""The evaluation's records in the run directory: written whole, read back as a baseline only when whole."""
from rlvr.train.evaluation import read_records, write_records


def test_records_are_written_whole_and_a_file_cut_short_is_no_baseline(tmp_path):
    records = {"heldout": [{"question": "1+1", "correct": True, "lenient": True}],
               "ood": [{"question": "2+2", "correct": False, "lenient": False, "score": float("nan")}]}
    write_records(tmp_path, "before", records)
    assert [p.name for p in tmp_path.iterdir()] == ["eval_before.jsonl"]  # no temporary file left
    assert (tmp_path / "eval_before.jsonl").read_text() == (
        '{"split": "heldout", "question": "1+1", "correct": true, "lenient": true}\n'
        '{"split": "ood", "question": "2+2", "correct": false, "lenient": false, "score": null}\n')
    assert read_records(tmp_path / "eval_before.jsonl") == {
        "heldout": [{"question": "1+1", "correct": True, "lenient": True}],
        "ood": [{"question": "2+2", "correct": False, "lenient": False, "score": None}]}
    with open(tmp_path / "eval_before.jsonl", "ab") as f:  # as an earlier version's line-by-line write left it
        f.write(b'{"split": "ood", "quest')
    assert read_records(tmp_path / "eval_before.jsonl") == {}  # not a baseline of some of the problems
