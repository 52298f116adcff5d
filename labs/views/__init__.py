"""Views, one module per area: accounts (platform) and lab (the live lab page)."""
