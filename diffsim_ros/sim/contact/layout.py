"""Index bookkeeping shared by the contact solvers (m = 3K unknowns, ``[n, t1, t2]`` per contact)."""

import torch

__all__ = ["ContactLayout", "flatten_problem"]


class ContactLayout:
    """Index helpers for K contacts.

    Attributes:
        count: K.
        m: 3K.
        contact: Contact of each variable, shape (m,).
        is_normal: Whether each variable is a normal impulse, bool (m,).
        normal_of: Index of each variable's normal impulse, shape (m,).
        normal_idx: Indices of the normal impulses, shape (K,).
        tangent_idx: Indices of the tangential impulses, shape (2K,).
    """

    def __init__(self, count, device):
        self.count = count
        self.m = 3 * count
        index = torch.arange(self.m, device=device)
        self.contact = index // 3
        self.is_normal = index % 3 == 0
        self.normal_of = 3 * self.contact
        self.normal_idx = torch.arange(count, device=device) * 3
        self.tangent_idx = torch.stack([self.normal_idx + 1, self.normal_idx + 2], -1).reshape(-1)

    def contact_matrix(self, dtype):
        """C[j, i] = 1 if variable j belongs to contact i, shape (m, K)."""
        return (self.contact[:, None] == torch.arange(self.count, device=self.contact.device)[None, :]).to(dtype)

    def normal_matrix(self, dtype):
        """N[j, normal_of[j]] = 1: picks each variable's normal impulse, shape (m, m)."""
        out = torch.zeros(self.m, self.m, dtype=dtype, device=self.contact.device)
        out[torch.arange(self.m, device=self.contact.device), self.normal_of] = 1.0
        return out


def flatten_problem(delassus, bias, mu, active):
    """Check sizes and flatten the leading batch dimensions of a contact problem.

    Args:
        delassus: (..., 3K, 3K). bias: (..., 3K). mu: (..., K). active: bool (..., K).

    Returns:
        ``(batch_shape, A (B, 3K, 3K), b (B, 3K), mu (B, K), active (B, K))``.

    Raises:
        ValueError: Inconsistent sizes.
    """
    k = bias.shape[-1] // 3
    if bias.shape[-1] != 3 * k or delassus.shape[-1] != 3 * k or mu.shape[-1] != k or active.shape[-1] != k:
        raise ValueError(
            f"inconsistent contact sizes: delassus {tuple(delassus.shape)}, bias {tuple(bias.shape)}, "
            f"mu {tuple(mu.shape)}, active {tuple(active.shape)}"
        )
    batch = torch.broadcast_shapes(delassus.shape[:-2], bias.shape[:-1], mu.shape[:-1], active.shape[:-1])
    m = 3 * k
    return (
        batch,
        delassus.expand(*batch, m, m).reshape(-1, m, m),
        bias.expand(*batch, m).reshape(-1, m),
        mu.expand(*batch, k).reshape(-1, k),
        active.expand(*batch, k).reshape(-1, k),
    )
