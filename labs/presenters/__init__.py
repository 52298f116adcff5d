"""What the pages, the websocket pushes and the exports show, one module per page or feature.

Presenters format the data they are given: no reads, no writes."""
