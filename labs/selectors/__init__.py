"""Every read the views and consumers do, one module per page or feature.

A selector returns data, never a response and never markup: the views decide between 404
and 403, the consumers between a close code and a message, and the presenters format."""
