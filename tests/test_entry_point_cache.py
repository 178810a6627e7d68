"""The on-disk cache of installed entry points: one file per environment, kept while nothing is
installed or removed, rescanned when something is."""

from __future__ import annotations

import os


def test_entry_point_cache_keeps_the_last_few_environments(tmp_path, monkeypatch):
    from rewardhub import _discovery

    folder = tmp_path / "rewardhub"
    folder.mkdir()
    for i in range(6):  # caches of six other environments, oldest first
        old = folder / f"entry-points-old{i}.json"
        old.write_text("{}")
        os.utime(old, (1_000_000 + i, 1_000_000 + i))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv("REWARDHUB_NO_CACHE", raising=False)
    monkeypatch.setenv("REWARDHUB_CACHE_KEEP", "3")
    first = _discovery.scan_entry_points()
    mine = _discovery._cache_file()
    kept = sorted(p.name for p in folder.iterdir())
    assert len(kept) == 3 and os.path.basename(mine) in kept
    assert "entry-points-old5.json" in kept and "entry-points-old4.json" in kept  # the newest others
    again = _discovery.scan_entry_points()  # served from the kept file
    assert [(e.group, e.name, e.dist) for e in again] == [(e.group, e.name, e.dist) for e in first]
    monkeypatch.setenv("REWARDHUB_NO_CACHE", "1")
    assert _discovery._cache_file() is None


def test_entry_point_cache_outlives_a_written_output_but_not_an_install(tmp_path, monkeypatch):
    """The current directory is on ``sys.path`` under ``python -m``: writing an output file there
    changes its modification time, which must not throw the cache away (a rescan costs a tenth of a
    second); a distribution installed into a ``sys.path`` folder must."""
    from rewardhub import _discovery

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("REWARDHUB_NO_CACHE", raising=False)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.syspath_prepend(str(work))
    scans = []
    real_scan = _discovery._scan
    monkeypatch.setattr(_discovery, "_scan", lambda groups: scans.append(1) or real_scan(groups))

    def bump(folder):  # a new mtime, as any file written there gives it
        stamp = os.stat(folder).st_mtime_ns + 10**9
        os.utime(folder, ns=(stamp, stamp))

    def names(found):
        return [(e.group, e.name, e.value, e.dist, e.version) for e in found]

    first = names(_discovery.scan_entry_points())
    assert len(scans) == 1
    (work / "out.jsonl").write_text("{}\n")
    bump(work)
    assert names(_discovery.scan_entry_points()) == first and len(scans) == 1  # served from the cache
    dist = work / "late_reward-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: late-reward\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[rewardhub.rewards]\nlate = late_reward:score\n")
    bump(work)
    found = names(_discovery.scan_entry_points())
    assert (
        len(scans) == 2 and ("rewardhub.rewards", "late", "late_reward:score", "late-reward", "1.0") in found
    )
    assert names(_discovery.scan_entry_points()) == found and len(scans) == 2
    bump(work)  # a folder that holds a distribution: any change counts (a reinstall in place)
    _discovery.scan_entry_points()
    assert len(scans) == 3
