"""The archiver: ended intents leave the hot store once the views hold them."""
