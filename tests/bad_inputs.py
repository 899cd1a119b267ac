"""The bad-input table (docs/bad-input.md), shared by the test and the doc:
(case, overrides, extra environment, text the error must contain). The doc's table is kept by
hand; tests/test_bad_inputs.py checks that it lists every case."""

GOOD = ["gate=always", "slm=oracle", "prompt=basic", "env=empty5x5_random", "eval.n_episodes=2"]

CASES = [
    (
        "unknown policy head",
        ["policy.head=words"],
        {},
        "policy.head='words': allowed ('slots', 'commands')",
    ),
    (
        "command head on a grid",
        ["policy.head=commands"],
        {},
        "policy.head='commands' scores each command from its features, which task "
        "'empty5x5_random' does not give",
    ),
    (
        "unknown text-game PPO input",
        ["env=tw_treasure", "env.task.ppo_input=room"],
        {},
        "ppo_input='room': allowed ('answer', 'player')",
    ),
    ("unknown env", ["env=fourroom"], {}, "Could not find 'env/fourroom'"),
    ("unknown prompt", ["prompt=fancy"], {}, "Could not find 'prompt/fancy'"),
    ("unknown gate", ["gate=sometimes"], {}, "Could not find 'gate/sometimes'"),
    ("unknown slm", ["slm=gpt9"], {}, "Could not find 'slm/gpt9'"),
    (
        "prompt not for env",
        ["env=higherlower", "prompt=hwbp"],
        {},
        "prompt variant 'hwbp' does not support env 'higherlower'",
    ),
    (
        "negative tau",
        ["gate=entropy", "gate.tau=-0.5"],
        {},
        "gate.tau=-0.5 is invalid: allowed 'auto' or a number >= 0 (bits)",
    ),
    (
        "tau range outside [0, log2|A|]",
        ["gate=entropy", "gate.tau_range=[2.5,3.0]"],
        {},
        "gate.tau_range=[2.5, 3.0] is invalid for empty5x5_random",
    ),
    (
        "mc_samples < 1",
        ["gate=entropy", "gate.tau=0.5", "gate.mc_samples=0"],
        {},
        "gate.mc_samples=0 is invalid: allowed an integer >= 1",
    ),
    (
        "n_episodes < 1",
        ["eval.n_episodes=0"],
        {},
        "eval.n_episodes=0 is invalid: allowed an integer in 1..100",
    ),
    (
        "overlapping seed splits",
        ["splits.validation=[0,150]"],
        {},
        "seed splits 'test' and 'validation' overlap",
    ),
    (
        "unknown eval split",
        ["eval.split=train"],
        {},
        "eval.split='train' is invalid: allowed ['test', 'validation']",
    ),
    (
        "missing slm.path",
        ["slm=qwen3.5-2b", "slm.backend.path=/nonexistent/qwen"],
        {},
        "slm.backend.path='/nonexistent/qwen'",
    ),
    ("hub id not cached, offline", ["slm=qwen3.5-2b"], {"HF_HUB_OFFLINE": "1"}, "slm.backend.path"),
    (
        "results root not writable",
        ["paths.root=/dev/null/results"],
        {},
        "results root /dev/null/results is not writable (Not a directory)",
    ),
    (
        "checkpoint name malformed",
        ["gate=never", "policy.checkpoint=r30"],
        {},
        "policy.checkpoint='r30' is invalid: allowed final, best, tK",
    ),
    (
        "checkpoint threshold unknown",
        ["gate=never", "policy.checkpoint=t7"],
        {},
        "policy.checkpoint=t7 is invalid for empty5x5_random: allowed t1..t4",
    ),
    (
        "checkpoint file missing",
        ["gate=never", "policy.path=/nonexistent/ppo.zip"],
        {},
        "policy.path='/nonexistent/ppo.zip' does not exist",
    ),
    (
        "training mixture id unknown",
        ["env=doorkey8", "gate=never", "env.task.train_gym_ids=[MiniGrid-DoorKey-7x7-v0]"],
        {},
        "train_gym_ids 'MiniGrid-DoorKey-7x7-v0' is not a registered MiniGrid id",
    ),
    (
        "unknown TextWorld game",
        ["env=tw_treasure", "env.task.game=zork"],
        {},
        "unknown TextWorld task 'zork'; allowed: ['quest', 'treasure', 'cooking']",
    ),
    (
        "generation parameter the game does not take",
        ["env=tw_treasure", "++env.task.generation.nb_rooms=3"],
        {},
        "TextWorld task 'treasure' takes no generation parameter ['nb_rooms']",
    ),
    (
        "TextWorld world without a room",
        ["env=tw_quest", "env.task.generation.nb_rooms=0"],
        {},
        "generation.nb_rooms=0 is invalid for TextWorld task 'quest': allowed 1..32",
    ),
    (
        "TextWorld negative object count",
        ["env=tw_quest", "env.task.generation.nb_objects=-3"],
        {},
        "generation.nb_objects=-3 is invalid for TextWorld task 'quest': allowed 0..64",
    ),
    ("malformed override", ["gate.tau=[0.1,"], {}, "no viable alternative at input '[0.1,'"),
    (
        "openai server unreachable",
        ["slm=openai", "slm.backend.base_url=http://127.0.0.1:9/v1", "slm.backend.max_retries=0"],
        {},
        "http://127.0.0.1:9/v1",
    ),
    (
        "missing API-key variable",
        ["slm=openai", "slm.backend.api_key_env=BENCH_MISSING_KEY"],
        {},
        "BENCH_MISSING_KEY",
    ),
    (
        "API key pasted as the variable's name",
        ["slm=openai", "slm.backend.api_key_env=sk-test-0123456789abcdef"],
        {},
        "slm.backend.api_key_env must be the NAME of an environment variable",
    ),
    (
        "credentials in the server URL",
        ["slm=openai", "slm.backend.base_url=http://me:hunter2hunter2@127.0.0.1:9/v1"],
        {},
        "slm.backend.base_url holds a URL with credentials (a user:password@",
    ),
    (
        "random gate p outside [0, 1]",
        ["gate=random", "gate.p=1.5"],
        {},
        "gate.p=1.5 is invalid: allowed 'match' or a number in [0, 1]",
    ),
    (
        "unknown eval mode",
        ["eval.mode=parallel"],
        {},
        "eval.mode='parallel' is invalid: allowed lockstep, sequential",
    ),
    (
        "no worker processes",
        ["eval.workers=0"],
        {},
        "eval.workers=0 is invalid: allowed a positive integer or 'auto'",
    ),
    (
        "seed not an integer",
        ["seed=abc"],
        {},
        "seed='abc' is invalid: allowed an integer >= 0",
    ),
    (
        "negative policy seed",
        ["gate=never", "policy.seed=-1"],
        {},
        "policy.seed=-1 is invalid: allowed an integer >= 0",
    ),
    (
        "no tuning trials",
        ["gate=entropy", "gate.tau=auto", "tuning.n_trials=0"],
        {},
        "tuning.n_trials=0 is invalid: allowed an integer >= 1",
    ),
    (
        "unknown gate key",
        ["gate=entropy", "+gate.tauu=0.9"],
        {},
        "unknown key gate.tauu: allowed keys of gate are",
    ),
    (
        "unknown eval key",
        ["+eval.n_episode=50"],
        {},
        "unknown key eval.n_episode: allowed keys of eval are",
    ),
    (
        "epistemic gate with one sample",
        ["gate=epistemic", "gate.tau=0.1", "gate.mc_samples=1"],
        {},
        "gate.mc_samples=1 is invalid for gate 'epistemic'",
    ),
    (
        "checkpoint threshold not in the recipe",
        ["gate=never", "policy.checkpoint=r999"],
        {},
        "policy.checkpoint=r999 is invalid for empty5x5_random: its reward thresholds are",
    ),
    (
        "match tolerance outside [0, 1]",
        ["gate=never", "policy.checkpoint=match", "policy.match_success=0.5"]
        + ["policy.match_tolerance=2"],
        {},
        "policy.match_tolerance=2 is invalid: allowed a number in [0, 1]",
    ),
    (
        "tau above the maximum entropy",
        ["gate=entropy", "gate.tau=5"],
        {},
        "a tau above the maximum entropy of 4 actions never asks",
    ),
    ("tau not finite", ["gate=entropy", "gate.tau=inf"], {}, "gate.tau=inf is invalid"),
    (
        "normalised tau above 1",
        ["gate=entropy", "gate.normalise=true", "gate.tau=1.5"],
        {},
        "gate.tau=1.5 is invalid for empty5x5_random: allowed 'auto' or a number in [0, 1 "
        "(gate.normalise=true)]",
    ),
    (
        "normalise not a boolean",
        ["gate=entropy", "gate.normalise=maybe"],
        {},
        "gate.normalise='maybe' is invalid: allowed true or false",
    ),
    (
        "normalise on a gate without an entropy threshold",
        ["gate=random", "+gate.normalise=true"],
        {},
        "gate.normalise=true is invalid for gate 'random': allowed only for a gate whose tau "
        "compares an MC-dropout entropy",
    ),
    (
        "learned gate tau above 1",
        ["env=fourrooms", "gate=learned", "gate.tau=1.5"],
        {},
        "gate.tau=1.5 is invalid for gate 'learned': allowed 'auto' or a number in [0, 1]",
    ),
    (
        "choice scoring of a prompt with rationale",
        ["slm=tiny", "prompt=stateful", "prompt.rationale=true", "slm.decoding.mode=choices"],
        {},
        "slm.decoding.mode=choices cannot score any answer of prompt=stateful with "
        "prompt.rationale=true",
    ),
    (
        "an unknown choice score",
        ["slm=tiny", "slm.decoding.mode=choices", "slm.decoding.choice_score=max"],
        {},
        "slm.decoding.choice_score='max' is invalid: allowed ['sum', 'mean']",
    ),
]
