"""Policy: what may happen in a turn (limits, budgets, a server's settings, where memories may be used), decided before it runs."""
