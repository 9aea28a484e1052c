"""The emulator parses launch flags exactly as `sglang serve` 0.5.23 does."""

from __future__ import annotations

import subprocess
import sys

import pytest

from pytest_glm5.sim.args import parse_args
from pytest_glm5.spec.sglang import flag_table


def test_table_is_sglangs_full_flag_set() -> None:
    flags = {f for opt in flag_table()["options"] for f in opt["flags"]}
    assert len(flag_table()["options"]) == 531  # 532 options with --help, read from the wheel
    for flag in ("--model-path", "--tp-size", "--ep-size", "--pp-size", "--attn-dp-size", "--moe-runner-backend",
                 "--mem-fraction-static", "--max-running-requests", "--disable-cuda-graph", "--quantization",
                 "--num-continuous-decode-steps", "--enable-mscclpp", "--enable-single-batch-overlap",
                 "--enable-torch-compile", "--enable-flashinfer-allreduce-fusion", "--enable-metrics",
                 "--stream-interval", "--cuda-graph-max-bs-decode"):
        assert flag in flags, flag
    assert "--enable-piecewise-cuda-graph" not in flags


def test_campaign_flags_parse() -> None:
    ns = parse_args(["--model-path", "m", "--tp-size", "8", "--moe-runner-backend", "flashinfer_cutlass",
                     "--max-running-requests", "1024", "--disable-cuda-graph", "--quantization", "modelopt_fp4",
                     "--ep-size", "8", "--mem-fraction-static", "0.75", "--num-continuous-decode-steps", "4"])
    assert (ns.tp_size, ns.ep_size, ns.mem_fraction_static) == (8, 8, 0.75)
    assert ns.disable_cuda_graph is True and ns.num_continuous_decode_steps == 4


def test_prefix_abbreviation_like_argparse() -> None:
    assert parse_args(["--model-path", "m", "--tp", "4"]).tp_size == 4


@pytest.mark.parametrize(("argv", "message"), [
    (["--pp", "2"], "ambiguous option: --pp could match"),
    (["--cuda-graph-max-bs", "8"], "ambiguous option: --cuda-graph-max-bs could match"),
    (["--enable-piecewise-cuda-graph"], "unrecognized arguments: --enable-piecewise-cuda-graph"),
    (["--quantization", "nvfp4"], "invalid choice: 'nvfp4'"),
    (["--moe-runner-backend", "flashinfer_cutlas"], "invalid choice: 'flashinfer_cutlas'"),
    (["--tp-size", "eight"], "invalid int value: 'eight'"),
])
def test_bad_flags_exit_2_with_argparse_message(argv: list[str], message: str,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        parse_args(["--model-path", "m", *argv])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "sglang serve: error:" in err and message in err


def test_missing_model_path(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse_args(["--tp-size", "8"])
    assert "--model-path" in capsys.readouterr().err


def test_sim_process_rejects_unknown_flag_with_exit_2() -> None:
    p = subprocess.run([sys.executable, "-m", "pytest_glm5.sim", "--model-path", "m", "--tp-szie", "8"],
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 2
    assert "unrecognized arguments: --tp-szie" in p.stderr
    assert "Traceback" not in p.stderr
