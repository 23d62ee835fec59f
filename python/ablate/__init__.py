"""Read sweeps, trials, metrics and comparisons from an ablate coordinator (ablated --http).

    import ablate
    c = ablate.Client.from_data_dir("~/.ablate")        # or ablate.Client("127.0.0.1:8080", token)
    rows = c.trials("quick")                             # one dict per trial
    curves = c.metrics("quick", ["loss", "val_loss"])    # the long table
    table = c.compare("quick", factor="attention.kind")

Standard library only; pandas, when installed, for the as_frame=True variants.
"""

from .client import AblateError, ApiError, Client, UnavailableError

__all__ = ["AblateError", "ApiError", "Client", "UnavailableError"]
__version__ = "0.1.0"
