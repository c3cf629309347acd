"""``draft``'s options for a policy and a unit's own reshard, as argparse reads them."""

from __future__ import annotations

import argparse

import pytest

from harness.cli.draft import add_arguments, argument_problem


def _parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_arguments(parser.add_subparsers())
    return parser.parse_args(["draft", "--config", "walkthrough", "--world-size", "4", *argv])


def test_policy_and_reshards_and_a_specs_defaults():
    args = _parse(
        "--param-dtype", "bfloat16", "--reduce-dtype", "float32",
        "--reshard-after-forward", "layers.1=false", "--reshard-after-forward", "layers.0=2",
    )  # fmt: skip
    assert (args.param_dtype, args.reduce_dtype) == ("bfloat16", "float32")
    assert dict(args.reshard_after_forward) == {"layers.1": False, "layers.0": 2}
    assert (args.batch_per_rank, args.seq_len) == (None, None)  # the draft's own: a spec's (2, 8)
    assert argument_problem(args) is None


@pytest.mark.parametrize("value", ["layers.1", "layers.1=maybe", "=false", "layers.1=0"])
def test_a_reshard_it_cannot_read_is_an_argparse_error(value, capsys):
    with pytest.raises(SystemExit):
        _parse("--reshard-after-forward", value)
    assert "--reshard-after-forward" in capsys.readouterr().err


def test_a_unit_given_twice_is_refused():
    args = _parse("--reshard-after-forward", "layers.1=false", "--reshard-after-forward", "layers.1=true")
    assert argument_problem(args) == "--reshard-after-forward: layers.1 given more than once"
