"""`coloco slash`: report equivocation; propose, veto, execute and inspect slashes."""
