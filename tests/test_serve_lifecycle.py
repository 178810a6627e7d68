"""``rewardhub serve``'s process lives through its rewards and ends as told: a reward that calls
``os._exit`` fails its sample and the server goes on, and a server with Ray terms drains and exits 0 on
SIGTERM. Against real server processes on 127.0.0.1."""

from __future__ import annotations

import pytest
from serve_process import Server
from serve_process import wait_for

pytest.importorskip("aiohttp")


@pytest.mark.timeout(300)
@pytest.mark.parametrize("executor", ["inline", "thread", "process"])
def test_a_reward_calling_os_exit_fails_its_sample_and_the_server_goes_on(tmp_path, executor):
    """Before: on the inline (and thread) executor the whole server ended at once, every client cut
    off and nothing in the log. On the process executor the worker ends (as before) and the row fails."""
    cfg = tmp_path / "exit.yaml"
    timeout = "      timeout_s: 60\n" if executor == "thread" else ""
    cfg.write_text("reward:\n  rewards:\n    - module: rewards_for_tests\n      function: misbehave\n"
                   f"      executor: {executor}\n{timeout}")
    with Server(cfg) as server:
        status, answer = server.post("/score", {"rows": [{"response": "ok:0.5"}, {"response": "exit"},
                                                         {"response": "ok:0.25"}]})
        assert status == 200, answer
        rows = answer["rows"]
        assert [rows[0]["score"], rows[1]["score"], rows[2]["score"]] == [0.5, None, 0.25], rows
        assert rows[1]["errors"]["misbehave"], rows[1]
        if executor != "process":
            assert "os._exit(3)" in rows[1]["errors"]["misbehave"], rows[1]
            wait_for(lambda: any("misbehave" in line and "os._exit(3)" in line for line in server.stderr),
                     "the warning naming the reward")
        assert server.get("/health")[0] == 200
        assert server.post("/score", {"rows": [{"response": "ok:1"}]})[1]["rows"][0]["score"] == 1.0
        assert server.stop() == 0


@pytest.mark.ray
@pytest.mark.slow
@pytest.mark.timeout(400)
def test_a_server_with_ray_terms_drains_and_exits_0_on_sigterm(tmp_path):
    """Before: Ray's failure-signal handler took SIGTERM (a stack dump in the log) and the server
    aborted at ``ray.shutdown`` (exit -6). Now the drain has the signal, and the server exits 0."""
    pytest.importorskip("ray")
    cfg = tmp_path / "ray.yaml"
    cfg.write_text("reward:\n  rewards:\n    - module: rewards_for_tests\n      function: misbehave\n"
                   "      executor: ray\n  workers:\n    num_workers: 1\n")
    with Server(cfg, env={"RAY_ADDRESS": ""}) as server:
        status, answer = server.post("/score", {"rows": [{"response": "ok:0.5"}]}, timeout=300)
        assert status == 200 and answer["rows"][0]["score"] == 0.5, answer  # Ray started, in a call
        code = server.stop(timeout=300)
    log = "".join(server.stderr)
    assert code == 0, log
    assert "rewardhub serve: stopped" in log
    assert "SIGTERM received" not in log, log
