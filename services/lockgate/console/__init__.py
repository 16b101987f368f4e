"""The console: an HTTP API and a web page over the views, for reviewers and operators."""
