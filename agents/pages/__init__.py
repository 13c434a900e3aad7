"""The operator console's pages: views, URLs and template tags (the templates live in the
project's templates/ui/)."""
