"""paperline: the library. Pure torch/numpy; it never imports prefect, mlflow or dvc."""
