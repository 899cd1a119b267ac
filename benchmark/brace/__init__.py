"""Agent-BRACE's training side: the belief and policy rewards computed by program from
the environment's true state (rewards), the teacher beliefs built from it (teacher), the
belief prompt whose oracle answer is the teacher's belief (prompt), and the SFT measurement of
format compliance and belief reward on held-out validation states (sft)."""
