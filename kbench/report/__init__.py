"""How a figure is shown: the Result (result) and the formatting every table shares
(_format)."""
