"""tunebench.lifetime.run_lock: one holder at a time, and a refusal that names the holder from its note."""

from __future__ import annotations

import json
import os

import pytest

from tunebench.lifetime.run_lock import held_while_running, lock_holder


class Refused(Exception):
    pass


def test_a_second_holder_is_refused_with_the_first_ones_note(tmp_path):
    path = tmp_path / "lock"
    with held_while_running(path, refused=Refused):
        with pytest.raises(Refused) as refusal:
            with held_while_running(path, refused=Refused):
                pass
        note = json.loads(refusal.value.args[0])
        assert note["pid"] == os.getpid() and lock_holder(refusal.value.args[0]).startswith(f"pid {os.getpid()} on ")
    with held_while_running(path, refused=Refused):  # released when the block ended
        pass


def test_a_link_in_the_locks_place_is_never_written_through(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("keep")
    (tmp_path / "lock").symlink_to(victim)
    with pytest.raises(OSError):
        with held_while_running(tmp_path / "lock", refused=Refused):
            pass
    assert victim.read_text() == "keep"


@pytest.mark.parametrize(("note", "said"), [
    ("", "another process"),
    ("not json\n" * 50, "another process (its note in the lock file is unreadable)"),
    (json.dumps({"pid": 7, "host": "h\nx", "since": "then"}), "pid 7 on h x since then"),
    (json.dumps({"pid": 7}), "pid 7 on ? since ?"),
])
def test_the_holder_is_said_from_its_note_and_nothing_else(note, said):
    assert lock_holder(note) == said
