"""Template filters the console's templates load (``console_words``)."""
