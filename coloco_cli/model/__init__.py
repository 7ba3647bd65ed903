"""`coloco model`: fetch a committed or released checkpoint, check it on chain, use it."""
