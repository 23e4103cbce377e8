"""Each word of a launch knows the span of the file it was read from (launch/placed.py): what apply edits."""

from __future__ import annotations

from infrarsi.launch.bash import interpret_script
from infrarsi.launch.placed import at_of, site_of

SCRIPT = """#!/bin/bash
TP=${TP:-8}
PP=4
GPUS=$(( 4 * 2 ))
OPTS=" \\
    --sequence-parallel \\
    --fp8-format hybrid"
ARGS=(--num-layers 32 "--seq-length 4096")
# --num-layers 99 in a comment
torchrun --nproc_per_node $GPUS pretrain_gpt.py --tensor-model-parallel-size $TP --pipeline-model-parallel-size=$PP \\
    $OPTS ${ARGS[@]} --micro-batch-size "2"
"""


def _where(word: str, text: str) -> tuple[str, bool, str] | None:
    at = at_of(word)
    return None if at is None else (text[at.start:at.end], at.quoted, at.var)


def test_every_word_of_the_launch_is_read_where_it_is_written():
    argv = interpret_script(SCRIPT, path="train.sh").commands[-1].argv
    got = {w: _where(w, SCRIPT) for w in argv[3:]}
    assert got["8"] == ("8", True, "TP")  # the ${TP:-8} default: written without quotes, naming TP
    assert got["--sequence-parallel"] == ("--sequence-parallel", True, "OPTS")  # in the option string, over lines
    assert got["hybrid"] == ("hybrid", True, "OPTS")
    assert got["--num-layers"] == ("--num-layers", False, "")  # an array element
    assert got["4096"] == ("4096", True, "")  # split out of a quoted element
    assert got["2"] == ("2", True, "")
    assert got["--pipeline-model-parallel-size=4"] is None  # pieces of two places: its value alone is placed
    assert at_of(argv[0]) is not None and at_of(argv[0]).start == SCRIPT.index("torchrun")
    # a computed value is read at the $GPUS word that gave it
    gpus = argv[argv.index("--nproc_per_node") + 1]
    assert gpus == "8" and at_of(gpus) is None and SCRIPT[site_of(gpus).start:site_of(gpus).end] == "$GPUS"
    # the comment's --num-layers is no word: the array's is the one read
    assert at_of(argv[argv.index("--num-layers")]).start == SCRIPT.index("--num-layers 32")


def test_an_argument_a_calling_script_passes_is_read_in_the_calling_script():
    outer = "srun bash train.sh 16 --micro-batch-size 4\n"
    args = interpret_script(outer, path="job.sh").commands[0].argv[3:]
    inner = interpret_script('N=$1\nshift\ntorchrun --nproc_per_node $N pretrain_gpt.py "$@"\n', path="train.sh",
                             args=args)
    argv = inner.commands[0].argv
    for word, text in [(argv[2], "16"), (argv[-1], "4"), (argv[-2], "--micro-batch-size")]:
        assert at_of(word).path == "job.sh" and outer[at_of(word).start:at_of(word).end] == text == word
