"""The one-update probe of the paper's analysis (`lopti analyze`): gradient share, Δπ and correct ratio per π bucket."""
