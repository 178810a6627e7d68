"""The registry: sources, duplicates, unknown and broken rewards, fingerprints, file targets."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import textwrap
import warnings

import pytest

import rewardhub
from rewardhub import RewardSpec
from rewardhub.errors import BrokenRewardError
from rewardhub.errors import ConflictingRewardError
from rewardhub.errors import DuplicateRewardError
from rewardhub.errors import UnknownRewardError
from rewardhub.errors import UsageError
from rewardhub.registry import build_registry
from rewardhub.testing import make_registry
from rewardhub.testing import write_distribution

BUILTINS = {"exact_match", "llm_judge", "llm_judge_group", "overlong_penalty", "regex_match", "think_format"}


def test_builtins_always_present_even_without_autoload():
    reg = build_registry(autoload=False)
    assert BUILTINS <= set(reg.names())
    assert all(reg.get_reward(n).source == "builtin" for n in BUILTINS)
    assert "math_verify" not in reg


def test_installed_plugins_have_dist_and_version():
    reg = build_registry()
    mv = reg.get_reward("math_verify")
    assert (mv.source, mv.dist, mv.version) == ("entry-point", "rewardhub-math", "0.1.0")
    rg = reg.get_reward("reasoning_gym.basic_arithmetic")
    assert (rg.source, rg.dist, rg.plugin) == ("plugin", "rewardhub-reasoning-gym", "reasoning_gym")
    assert rg.data_sources == ("basic_arithmetic", "reasoning_gym/basic_arithmetic")


def test_unknown_reward_suggests_close_names():
    reg = build_registry(autoload=False)
    with pytest.raises(
        UnknownRewardError, match=r"unknown reward 'exact_mach'\ndid you mean: 'exact_match'"
    ) as e:
        reg.get_reward("exact_mach")
    assert "rewardhub list" in str(e.value)
    assert isinstance(e.value, LookupError)


def test_duplicate_names_both_sources():
    def exact_match(*, response, **kw):
        return 1.0

    class Dup:
        @rewardhub.hookimpl
        def rewardhub_register_rewards(self):
            return [exact_match]

    reg = make_registry(Dup())  # a plugin and the built-in: a conflict, settled only where it is used
    spec = reg.get_reward("exact_match")
    assert spec.status == "conflict" and "builtin" in spec.error and "plugin 'plugin-0'" in spec.error
    assert [s.source for s in reg.conflicts["exact_match"]] == ["builtin", "plugin"]
    with pytest.raises(
        ConflictingRewardError, match=r"registered by 2 installed sources: builtin and plugin"
    ):
        reg.term_spec({"name": "exact_match"})
    reg.prefer({"exact_match": "plugin-0"})
    assert reg.get_reward("exact_match").source == "plugin" and "exact_match" not in reg.conflicts
    with pytest.raises(
        DuplicateRewardError, match=r"'exact_match' registered twice: plugin 'plugin-0' and config"
    ):
        reg.add(RewardSpec(name="exact_match", target="x.py:f", source="config"))


def test_hook_returning_functions_and_specs():
    @rewardhub.reward(name="shout", timeout_s=3, executor="thread")
    def shout_fn(*, response, **kw):
        """1.0 for upper case."""
        return float(response.isupper())

    class P:
        @rewardhub.hookimpl
        def rewardhub_register_rewards(self):
            return [shout_fn, RewardSpec(name="spec_one", target="rewardhub.builtin.match:exact_match")]

    reg = make_registry(P())
    spec = reg.get_reward("shout")
    assert spec.summary == "1.0 for upper case."
    assert spec.policy.timeout_s == 3 and spec.policy.executor == "thread"
    assert reg.load("spec_one")(response="a", ground_truth="A") == 1.0


def test_misspelled_hook_is_a_broken_plugin(tmp_path, monkeypatch):
    write_distribution(tmp_path, "typo-plugin", "1.2.3", {"rewardhub": {"typo": "typo_mod"}},
                       {"typo_mod": "def rewardhub_register_reward():\n    return []\n"})
    monkeypatch.syspath_prepend(str(tmp_path))
    reg = build_registry()
    spec = reg.get_reward("typo")
    assert spec.status == "broken"
    assert "rewardhub_register_reward" in spec.error and spec.dist == "typo-plugin"


PLUGIN_MODULE = """
import json
from rewardhub import hookimpl
LIMIT = 3
class Helper:
    pass
def helper():
    pass
@hookimpl
def rewardhub_register_rewards():
    return []
def rewardhub_legacy_aliases():
    return {}
def rewardhub_register_reward():  # a misspelled hook: caught by check_pending
    return []
"""


def test_a_module_plugins_values_that_cannot_be_hooks_are_skipped_at_once(monkeypatch):
    """Registering a module looks up statically (pluggy's getattr_static) only its functions: constants,
    imported modules and classes are skipped at once (that lookup of every name was most of `list`'s
    registering); the hooks found are the same."""
    import inspect
    import types

    import pluggy

    from rewardhub._manager import RewardhubPluginManager

    mod = types.ModuleType("plug")
    exec(PLUGIN_MODULE, mod.__dict__)
    pm = RewardhubPluginManager()
    looked = []
    real = inspect.getattr_static
    monkeypatch.setattr(inspect, "getattr_static", lambda o, n, *d: looked.append(n) or real(o, n, *d))
    pm.register(mod, name="plug")
    assert set(looked) == {"helper", "rewardhub_register_rewards", "rewardhub_legacy_aliases",
                           "rewardhub_register_reward"}
    assert pm.hooks_of("plug") == ["rewardhub_legacy_aliases", "rewardhub_register_reward",
                                   "rewardhub_register_rewards"]
    with pytest.raises(pluggy.PluginValidationError, match="rewardhub_register_reward"):
        pm.check_pending()


def test_broken_plugin_does_not_break_others(tmp_path, monkeypatch):
    write_distribution(tmp_path, "bad-plugin", "0.3.1", {"rewardhub": {"bad": "bad_mod"}},
                       {"bad_mod": "import no_such_dependency_xyz\n"})
    monkeypatch.syspath_prepend(str(tmp_path))
    reg = build_registry()
    bad = reg.get_reward("bad")
    assert bad.status == "broken" and "no_such_dependency_xyz" in bad.error
    assert reg.get_reward("math_verify").status == "ok"
    with pytest.raises(
        BrokenRewardError, match=r"reward 'bad' is broken: ModuleNotFoundError.*no_such_dependency_xyz"
    ):
        reg.load("bad")
    with pytest.raises(BrokenRewardError, match="bad-plugin 0.3.1"):
        reg.term_spec({"name": "bad"})


def test_env_autoload_off_and_forced_plugin(monkeypatch):
    monkeypatch.setenv("REWARDHUB_DISABLE_PLUGIN_AUTOLOAD", "1")
    reg = build_registry()
    assert "math_verify" not in reg and "reasoning_gym" not in reg
    monkeypatch.setenv("REWARDHUB_PLUGINS", "reasoning_gym,math_verify")
    reg = build_registry()
    assert "reasoning_gym" in reg and "math_verify" in reg


def test_config_block_and_load():
    reg = build_registry({"plugins": {"block": ["reasoning_gym", "math_verify"]}})
    assert "reasoning_gym" not in reg and "math_verify" not in reg
    reg = build_registry({"plugins": {"autoload": False, "load": ["math_verify"]}})
    assert "math_verify" in reg and "reasoning_gym" not in reg


def test_file_term_gets_deterministic_module_and_pickles(tmp_path):
    f = tmp_path / "my_reward.py"
    f.write_text("def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
                 "    return float(solution_str.strip() == ground_truth)\n")
    reg = build_registry({"rewards": [{"path": str(f)}]}, autoload=False)
    spec = reg.get_reward("compute_score")
    assert spec.source == "config" and spec.sha256 and spec.target.endswith("my_reward.py:compute_score")
    fn = reg.load(spec)
    assert fn.__module__.startswith("_rewardhub_files.my_reward_") and fn.__module__ in sys.modules
    # the same file gives the same module name in another process, and pickling by reference works there
    code = textwrap.dedent(f"""
        import pickle, sys
        from rewardhub.registry import build_registry
        reg = build_registry({{"rewards": [{{"path": {str(f)!r}}}]}}, autoload=False)
        fn = reg.load("compute_score")
        print(fn.__module__)
        sys.stdout.flush()
        g = pickle.loads(sys.stdin.buffer.read())
        print(g is fn, g("x", "4", "4"))
    """)
    out = subprocess.run(
        [sys.executable, "-c", code], input=pickle.dumps(fn), capture_output=True, check=True
    )
    lines = out.stdout.decode().split()
    assert lines == [fn.__module__, "True", "1.0"]


def test_file_and_module_term_errors(tmp_path):
    reg = build_registry(autoload=False)
    with pytest.raises(UsageError, match=r"reward file '.*nope.py' does not exist"):
        reg.term_spec({"path": str(tmp_path / "nope.py")})
    with pytest.raises(UsageError, match=r"reward module 'no_such_mod_abc' cannot be imported"):
        reg.term_spec({"module": "no_such_mod_abc", "function": "f"})
    with pytest.raises(UsageError, match="neither 'name' nor 'path'"):
        reg.term_spec({"weight": 1})


def test_fingerprint_same_across_processes_and_changes_with_installation(tmp_path, monkeypatch):
    here = build_registry().fingerprint()
    code = "from rewardhub.registry import build_registry; print(build_registry().fingerprint())"
    other = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert here == other
    write_distribution(tmp_path, "extra-rewards", "2.0", {"rewardhub.rewards": {"extra_r": "extra_mod:f"}},
                       {"extra_mod": "def f(**kw):\n    return 1.0\n"})
    monkeypatch.syspath_prepend(str(tmp_path))
    reg = build_registry()
    assert reg.fingerprint() != here
    assert reg.fingerprint_items()["extra_r"] == "extra-rewards==2.0"


def test_decorator_validates_its_arguments():
    with pytest.raises(
        UsageError, match=r"executor='gpu' is not valid\nallowed: inline, thread, process, ray"
    ):
        rewardhub.reward(executor="gpu")


def test_hook_rewardhub_legacy_aliases():
    from rewardhub._manager import RewardhubPluginManager
    from rewardhub.errors import RewardhubDeprecationWarning
    from rewardhub.execution import Runner
    from rewardhub.registry import RewardRegistry

    class Renamed:
        @rewardhub.hookimpl
        def rewardhub_register_rewards(self):
            return [RewardSpec(name="exact_answer", target="rewardhub.builtin.match:exact_match")]

        @rewardhub.hookimpl
        def rewardhub_legacy_aliases(self):
            return {"old_exact": "exact_answer"}

    reg = make_registry(Renamed())
    with pytest.warns(
        RewardhubDeprecationWarning, match="'old_exact' is deprecated: it is now 'exact_answer'"
    ):
        assert reg.get_reward("old_exact").name == "exact_answer"
    with pytest.warns(RewardhubDeprecationWarning):
        with Runner.from_config({"rewards": [{"name": "old_exact"}]}, registry=reg) as runner:
            assert runner.score([{"response": "A", "ground_truth": "a"}]).scores == [1.0]
    with pytest.raises(UnknownRewardError):
        reg.get_reward("never_was")

    class Clash:
        @rewardhub.hookimpl
        def rewardhub_legacy_aliases(self):
            return {"old_exact": "something_else"}

    pm = RewardhubPluginManager()
    pm.register(Renamed(), name="renamed")
    pm.register(Clash(), name="clash")
    fresh = RewardRegistry()
    fresh.collect_aliases(pm)
    assert "clash" in pm.broken or "renamed" in pm.broken
    with pytest.raises(TypeError):
        pm.broken["clash"] = (None, None, "written from outside")  # type: ignore[index]
    broken = pm.broken.get("clash") or pm.broken.get("renamed")
    assert "old_exact" in broken[2] and "conflicts" in broken[2]


def test_legacy_aliases_do_what_the_hookspec_says():
    """The hookspec's docstring, claim by claim: only get_reward follows an alias, a registered name is
    never an alias, an alias to nothing is unknown, and a bad return value breaks only its plugin."""
    from rewardhub.errors import RewardhubDeprecationWarning

    class Aliases:
        @rewardhub.hookimpl
        def rewardhub_register_rewards(self):
            return [RewardSpec(name="exact_answer", target="rewardhub.builtin.match:exact_match")]

        @rewardhub.hookimpl
        def rewardhub_legacy_aliases(self):
            return {"old_exact": "exact_answer", "exact_match": "exact_answer", "gone": "never_registered"}

    class NotAMapping:
        @rewardhub.hookimpl
        def rewardhub_register_rewards(self):
            return [RewardSpec(name="still_here", target="rewardhub.builtin.match:exact_match")]

        @rewardhub.hookimpl
        def rewardhub_legacy_aliases(self):
            return ["old_name"]

    reg = make_registry(Aliases(), NotAMapping())
    with pytest.warns(RewardhubDeprecationWarning):
        assert reg.get_reward("old_exact").name == "exact_answer"
    assert "old_exact" not in reg and not reg.has_reward("old_exact") and "old_exact" not in reg.names()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a registered name is looked up as itself, with no warning
        assert reg.get_reward("exact_match").name == "exact_match"
    with pytest.raises(UnknownRewardError, match="'gone'"):
        reg.get_reward("gone")
    broken = [s for s in reg.list_rewards() if s.status == "broken"]
    assert len(broken) == 1 and "not a mapping" in broken[0].error, broken
    assert reg.get_reward("still_here").status == "ok"  # the plugin's rewards are still registered


def test_hooks_go_through_pluggy_one_plugin_at_a_time():
    """A ``wrapper=True`` implementation wraps each plugin's call; a raising plugin breaks alone."""
    calls = []

    class Wrapper:
        @rewardhub.hookimpl(wrapper=True)
        def rewardhub_register_rewards(self):
            result = yield
            calls.append(len(result))
            return result

    class Good:
        @rewardhub.hookimpl
        def rewardhub_register_rewards(self):
            return [RewardSpec(name="good_one", target="rewardhub.builtin.match:exact_match")]

    class Bad:
        @rewardhub.hookimpl
        def rewardhub_register_rewards(self):
            raise RuntimeError("no rewards today")

    good, bad = Good(), Bad()
    good.__name__, bad.__name__ = "good", "bad"
    reg = make_registry(Wrapper(), good, bad, include_builtins=False)
    assert reg.get_reward("good_one").status == "ok"
    assert (
        reg.get_reward("bad").status == "broken"
        and "RuntimeError: no rewards today" in reg.get_reward("bad").error
    )
    assert calls == [1]  # wrapped the good plugin's call; the bad one raised through the wrapper


def test_rewardhub_trace_prints_the_hook_calls():
    env = {**os.environ, "REWARDHUB_TRACE": "1", "REWARDHUB_DISABLE_PLUGIN_AUTOLOAD": "1"}
    proc = subprocess.run([sys.executable, "-m", "rewardhub", "list", "--json"], env=env, capture_output=True,
                          text=True, check=True)
    # one traced call per built-in plugin (rewardhub.builtin.format, .grader, .judge, .judge_modes, .length,
    # .match)
    assert proc.stderr.count("  rewardhub_register_rewards [hook]") == 6
    assert proc.stderr.count("finish rewardhub_register_rewards -->") == 6
    assert json.loads(proc.stdout)  # the listing itself is unchanged on stdout
