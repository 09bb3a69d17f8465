"""NGN-M (Islamov, Ajroldi, Orvieto, Lucchi; NeurIPS 2025): the step-size sweep of NGN, NGN-M and
NGN-MD against SGD, SGDM and Adam: problems, runs, the decades-within-10% summary, plots.
The optimizers themselves live in paperline/optim/ngn.py and ngn_md.py."""
