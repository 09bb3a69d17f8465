"""Method implementations, one package per method: model, loss, optimizer, metric, its claims (`claims.py`) and summary."""
