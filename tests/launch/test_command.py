"""The launch-script reader against real bash: for every fixture script, the command it reads must be
exactly the argv bash itself would run (word splitting, arrays, defaults, arithmetic, branches)."""

import re
import subprocess
from pathlib import Path

import pytest

from infrarsi.launch.bash import ScriptError, interpret_script
from infrarsi.launch.command import split_launcher

FIX = Path(__file__).parents[1] / "fixtures"
SCRIPTS = sorted(FIX.glob("megatron/*.sh")) + sorted(FIX.glob("torchtitan/*.sh"))
ARGS = ["ckpt", "tb logs", "vocab.json", "merges.txt", "data_prefix"]
ENV = {"MASTER_PORT": "6000", "LAUNCH_NOTE": "a  b"}

# torchrun and srun replaced by functions that write their argv, NUL-separated; the commands a launch's
# $(...) and backticks run print CMD, which is what a substitution the reader keeps unrun is compared as
STUBS = ('torchrun() { printf "%s\\0" torchrun "$@" > "$OUT"; }\n'
         'srun() { printf "%s\\0" srun "$@" > "$OUT"; }\n'
         'date() { printf CMD; }\ngit() { printf CMD; }\n')
_SUBST = re.compile(r"\$\([^()]*\)|`[^`]*`")


def bash_argv(script: Path, tmp: Path) -> list[str]:
    out = tmp / "argv.bin"
    (tmp / "pretrain_gpt.py").write_text("")
    driver = tmp / "driver.sh"
    driver.write_text(STUBS + f'source "{script}" "$@"\n')
    env = {"PATH": "/usr/bin:/bin", "OUT": str(out), **ENV}
    subprocess.run(["bash", str(driver), *ARGS], cwd=tmp, env=env, check=True, capture_output=True, timeout=30)
    return out.read_bytes().decode().split("\0")[:-1]


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_reader_matches_bash(script, tmp_path):
    want = bash_argv(script, tmp_path)
    res = interpret_script(script.read_text(), path=str(script), env={**ENV, "PWD": str(tmp_path)}, args=ARGS)
    launches = [[_SUBST.sub("CMD", a) for a in c.argv] for c in res.commands if c.argv[0] in ("torchrun", "srun")]
    assert launches and launches[-1] == want


def test_quoting_and_expansions():
    text = r'''
A="x y"
B=${UNSET:-"d e"}
ARR=(--one "two three" $A)
ARR+=("--four 4")
N=$(( (2 + 3) * 4 ))
if [[ "$A" == x* ]] && [ $N -gt 10 ]; then W=yes; elif true; then W=no; else W=never; fi
cmd "$A" $A ${ARR[@]} "${ARR[@]}" "$B" $N $W 'lit $A' "\$A" "$(date)" ""
'''
    res = interpret_script(text)
    assert res.commands[-1].argv == ["cmd", "x y", "x", "y", "--one", "two", "three", "x", "y", "--four", "4",
                                     "--one", "two three", "x", "y", "--four 4", "d e", "20", "yes", "lit $A",
                                     "$A", "$(date)", ""]


def test_launcher_split_and_world_size():
    la = split_launcher(["srun", "-N", "4", "--ntasks-per-node=1", "torchrun", "--nproc_per_node", "8",
                         "pretrain_gpt.py", "--num-layers", "2"])
    assert la.kinds == ["srun", "torchrun"] and la.world_size == 32 and la.program == ["pretrain_gpt.py"]
    la = split_launcher(["python", "-m", "torch.distributed.run", "--nnodes=2", "--nproc-per-node=4", "-m",
                         "torchtitan.train", "--module", "llama3"])
    assert la.world_size == 8 and la.program == ["-m", "torchtitan.train"] and la.args == ["--module", "llama3"]


def test_errors_name_the_line():
    with pytest.raises(ScriptError, match=r"^line 3: `while` is not supported"):
        interpret_script("A=1\n\nwhile true; do :; done\n")
    with pytest.raises(ScriptError, match=r"^line 2: unclosed double quote"):
        interpret_script('A=1\nB="abc\n')
    with pytest.raises(ScriptError, match=r"^line 1: if without fi"):
        interpret_script("if [ 1 = 1 ]; then\nA=2\n")


def test_shell_join_keeps_pwd_a_live_expansion_and_quotes_the_rest():
    import subprocess

    from infrarsi.launch.command import shell_join

    argv = ["printf", "%s|", "--data-cache-path", "${PWD}/cache dir", "it's", "${PWD}"]
    line = shell_join(argv)
    assert line.count('"${PWD}"') == 2 and "'cache dir'" not in line.split('"${PWD}"')[0]
    out = subprocess.run(["bash", "-c", line], cwd="/tmp", capture_output=True, text=True).stdout
    assert out == "--data-cache-path|/tmp/cache dir|it's|/tmp|"
