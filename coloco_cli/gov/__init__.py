"""`coloco gov`: token holders delegate, propose, vote, queue and execute."""
