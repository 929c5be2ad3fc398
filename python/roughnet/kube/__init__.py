"""roughnet on Kubernetes: a local cluster built here, its images, and the runs inside it."""
