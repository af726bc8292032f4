import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))

FEMALE = ["Anna", "Maria", "Linda"]
MALE = ["John", "David", "Mark"]
NAME_TO_GROUP = {n: "female" for n in FEMALE} | {n: "male" for n in MALE}


@pytest.fixture
def sim_inputs(tmp_path):
    """A names CSV and a prompt file with ``n`` prompts over two tasks, for simulations."""

    def make(n_prompts: int = 400):
        names = tmp_path / "names.csv"
        names.write_text("name,gender,race,source\n" + "".join(f"{n},female,,test\n" for n in FEMALE)
                         + "".join(f"{n},male,,test\n" for n in MALE), encoding="utf-8")
        prompts = tmp_path / "prompts.jsonl"
        with prompts.open("w") as fh:
            for i in range(n_prompts):
                task = "write a story" if i % 2 else "career advice"
                fh.write(json.dumps({"id": f"p{i}", "text": f"Prompt number {i}.", "domain": "d", "task": task}) + "\n")
        return names, prompts

    return make
