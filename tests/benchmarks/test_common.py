"""Tests of the module the benchmark runners share (benchmarks/common.py)."""

import argparse
import importlib
import json
import multiprocessing
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch

from benchmarks import common


def _threads_of_this_process(_: int) -> int:
    return torch.get_num_threads()


def test_mean_and_standard_error() -> None:
    mean, error = common.mean_and_standard_error([1.0, 2.0, 3.0])
    assert mean == 2.0 and abs(error - (1.0 / 3**0.5)) < 1e-12
    assert common.mean_and_standard_error([4.0]) == (4.0, 0.0)


def test_integer_options_reject_what_is_below_their_minimum() -> None:
    parse = common.integer_argument(1)
    assert parse("3") == 3
    for text, message in [("0", "must be at least 1; got 0"), ("two", "must be an integer")]:
        with pytest.raises(argparse.ArgumentTypeError, match=message):
            parse(text)


def test_every_runner_parser_has_out_smoke_and_one_thread_by_default(tmp_path) -> None:
    parser = common.runner_parser("A runner.\n\nDetails.", out=tmp_path / "results")
    assert parser.description == "A runner."
    args = parser.parse_args([])
    assert (args.out, args.smoke, args.threads) == (tmp_path / "results", False, 1)
    assert parser.parse_args(["--threads", "2", "--smoke"]).threads == 2
    with pytest.raises(SystemExit):
        parser.parse_args(["--threads", "0"])


def test_seed_options_give_the_range_of_seeds() -> None:
    parser = argparse.ArgumentParser()
    common.add_seed_options(parser, default=3)
    assert list(common.seed_range(parser.parse_args([]))) == [0, 1, 2]
    assert list(common.seed_range(parser.parse_args(["--first-seed", "5", "--seeds", "2"]))) == [
        5,
        6,
    ]


def test_use_threads_sets_the_threads_of_this_process() -> None:
    previous = torch.get_num_threads()
    try:
        common.use_threads(1)
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(previous)


def test_run_jobs_keeps_the_order_and_reports_every_result(capsys) -> None:
    results = common.run_jobs(
        lambda spec: spec * 10, [3, 1, 2], jobs=1, threads=1, describe=lambda s, r: f"{s}->{r}"
    )
    assert results == [30, 10, 20]
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(" (")[0] for line in lines] == ["[1/3] 3->30", "[2/3] 1->10", "[3/3] 2->20"]


def test_worker_processes_run_on_the_threads_given() -> None:
    assert common.run_jobs(_threads_of_this_process, [0, 1], jobs=2, threads=2) == [2, 2]


@pytest.mark.parametrize(("cuda_available", "start_method"), [(False, None), (True, "spawn")])
def test_worker_processes_start_fresh_where_cuda_is_available(
    monkeypatch, cuda_available, start_method
) -> None:
    r"""A forked worker cannot use CUDA once the parent touched it: with CUDA present the
    workers are spawned; without it the platform's default stays."""
    contexts = []

    class RecordingPool(ThreadPoolExecutor):
        def __init__(self, max_workers, mp_context, initializer, initargs):
            # Threads of this process: the initializer (the workers' torch threads) would
            # set this process's.
            contexts.append(mp_context)
            super().__init__(max_workers)

    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda_available)
    monkeypatch.setattr(common, "ProcessPoolExecutor", RecordingPool)
    assert common.run_jobs(abs, [-1, -2], jobs=2, threads=1) == [1, 2]
    expected = multiprocessing.get_context(start_method)
    assert [context.get_start_method() for context in contexts] == [expected.get_start_method()]


def test_a_stored_run_is_loaded_instead_of_run_again(tmp_path) -> None:
    class Spec:
        key = "run0"

    calls = []

    def run(spec):
        calls.append(spec)
        return {"regret": [0.5]}

    first = common.stored_run(Spec(), tmp_path / "runs", run)
    second = common.stored_run(Spec(), tmp_path / "runs", run)
    assert first == second == {"regret": [0.5]}
    assert len(calls) == 1
    assert [path.name for path in (tmp_path / "runs").iterdir()] == ["run0.pt"]


def test_results_are_saved_atomically_into_a_new_folder(tmp_path) -> None:
    path = tmp_path / "runs" / "run0.pt"
    common.save_atomically({"regret": [0.1, 0.05]}, path)
    common.save_atomically({"regret": [0.2]}, path)
    assert torch.load(path) == {"regret": [0.2]}
    assert [p.name for p in path.parent.iterdir()] == ["run0.pt"]


def test_a_printed_table_prints_each_row_and_keeps_the_whole_table(capsys) -> None:
    table = common.PrintedTable(["n", "seconds"])
    table.add_row([40, "1.25"])
    table.add_row([72, "2.50"])
    assert capsys.readouterr().out == "| 40 | 1.25 |\n| 72 | 2.50 |\n"
    assert table.markdown() == "| n | seconds |\n| --- | --- |\n| 40 | 1.25 |\n| 72 | 2.50 |\n"


def test_a_bo_run_for_storing_holds_its_tensors_on_the_cpu() -> None:
    from botorch_nn_uq.bo import Strategy

    result = common.run_bo_for_storing(
        "levy", 2, Strategy("random", acquisition=""), iterations=1, n_initial=3, seed=0
    )
    assert result.X.shape == (4, 2) and result.values.shape[0] == 4
    assert result.X.device.type == result.values.device.type == "cpu"


def test_protocol_1_runs_keep_the_names_of_their_stored_results() -> None:
    # A repeated command finds the stored runs by these names, so they must not change.
    from benchmarks import nomu_bo_suite, nomu_paper_variant

    suite_run = nomu_bo_suite.RunSpec("levy", 5, "gp", "logei", 3, 64, 8, 10, 512)
    assert suite_run.key == "levy-5d_gp+logei_seed3_it64_init8_r10_raw512"
    paper_run = nomu_paper_variant.RunSpec("perm", 2, 1, 2, 4, 2, 16, 0.1, "cuda:1")
    assert paper_run.key == "perm-2d_seed1_it2_init4_r2_raw16_mw0.1_cuda1"


def test_json_is_written_atomically_into_a_new_folder(tmp_path) -> None:
    path = tmp_path / "runs" / "job.json"
    common.write_json_atomically({"nll": 1.5}, path)
    assert json.loads(path.read_text()) == {"nll": 1.5}
    assert [p.name for p in path.parent.iterdir()] == ["job.json"]


def test_summary_header_names_the_command_and_its_threads() -> None:
    header = common.summary_header("/somewhere/benchmarks/runner.py", ["--smoke"], 2)
    assert header == (
        "Command: `python -m benchmarks.runner --smoke` (torch threads per process: 2)"
    )


@pytest.mark.parametrize("centre", ["mean", "median"])
def test_best_so_far_plots_are_written_per_problem(tmp_path, centre) -> None:
    pytest.importorskip("matplotlib")
    runs = torch.tensor([[1.0, 0.5, 0.0], [2.0, 1.0, 0.5]], dtype=torch.float64)
    curves = {"levy-2d": {"a": (torch.arange(3) + 4, runs), "b": (torch.arange(3) + 4, runs)}}
    (path,) = common.plot_best_so_far(curves, tmp_path, "regret", centre=centre)
    assert path == tmp_path / "best_so_far_levy-2d.png"
    assert path.stat().st_size > 1000


def test_the_device_option_defaults_to_the_cpu_and_refuses_unusable_devices() -> None:
    parser = argparse.ArgumentParser()
    common.add_device_option(parser)
    assert parser.parse_args([]).device == "cpu"
    assert parser.parse_args(["--device", "cpu"]).device == "cpu"
    with pytest.raises(argparse.ArgumentTypeError, match="must be a device name .* got 'gpu'"):
        common.device_argument("gpu")
    if not torch.cuda.is_available():
        with pytest.raises(argparse.ArgumentTypeError, match="no cuda device here"):
            common.device_argument("cuda")


MODEL_RUNNERS = (
    "conditioning",
    "ensemble_training_cost",
    "hyper_deep_search_cost",
    "neon_composite",
    "neon_profile",
    "nomu_bo_suite",
    "nomu_paper_variant",
    "robust_target",
    "scale_cost",
    "scale_suite",
    "search_scaling",
    "uci_regression",
)


@pytest.mark.parametrize("name", MODEL_RUNNERS)
def test_every_model_runner_takes_a_device(name: str, tmp_path, capsys) -> None:
    runner = importlib.import_module(f"benchmarks.{name}")
    with pytest.raises(SystemExit) as error:
        runner.main(["--out", str(tmp_path), "--device", "gpu"])
    assert error.value.code == 2
    assert "argument --device: must be a device name" in capsys.readouterr().err


def test_results_of_another_device_than_the_cpu_go_to_a_file_of_their_own() -> None:
    path = Path("results") / "cost.md"
    assert common.device_path(path, "cpu") == path
    assert common.device_path(path, "cuda") == Path("results") / "cost_cuda.md"
    assert common.device_path(path, "cuda:1") == Path("results") / "cost_cuda1.md"
    assert common.device_suffix("cpu") == ""
    assert common.device_suffix("cuda:1") == "_cuda1"


def test_device_seconds_is_the_wall_clock_on_the_cpu() -> None:
    before = time.perf_counter()
    assert before <= common.device_seconds("cpu") <= time.perf_counter()
