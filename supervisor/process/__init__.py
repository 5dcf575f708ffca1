"""The supervisor process: leases, intake and admission, reclaim, batched starts, monitors."""
