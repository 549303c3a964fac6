"""Where documents come from. Each source only queues rows in `connector.documents`; workers do the rest.
The SQL source needs no code here: a row inserted into `connector.documents` is already in the queue."""
