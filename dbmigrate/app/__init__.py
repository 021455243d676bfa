"""Use cases the user interfaces call: run, resume, rollback, plan, check, ... One error boundary."""
